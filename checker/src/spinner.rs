//! What the checker is doing while it builds and runs: a spinner with the phase and
//! the time spent on a terminal; nothing on a pipe or a file, where the report alone
//! is wanted. With [`checker::TIMINGS_ENV`] set, each phase's wall time goes to stderr
//! as it ends (`[timing] 6.4 s  running 3 rank(s)`): where grading's time goes.
use std::cell::RefCell;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

pub struct Spinner {
    bar: ProgressBar,
    /// The phase under way and when it began, when timings are asked for.
    timing: Option<RefCell<Option<(String, Instant)>>>,
}

impl Spinner {
    /// A spinner on stderr, hidden when stderr is not a terminal (or `quiet`).
    pub fn new(quiet: bool) -> Spinner {
        let timing = std::env::var_os(checker::TIMINGS_ENV).map(|_| RefCell::new(None));
        if quiet || !std::io::stderr().is_terminal() {
            return Spinner { bar: ProgressBar::hidden(), timing };
        }
        let bar = ProgressBar::new_spinner();
        if let Ok(style) = ProgressStyle::with_template("{spinner} {prefix}: {msg} ({elapsed})") {
            bar.set_style(style);
        }
        bar.enable_steady_tick(Duration::from_millis(120));
        Spinner { bar, timing }
    }

    /// Which step is being worked on.
    pub fn step(&self, step: u8) {
        self.bar.set_prefix(format!("step {step}"));
    }

    /// The phase: "building", "running 3 ranks", ...
    pub fn phase(&self, what: &str) {
        self.time_phase(Some(what));
        self.bar.set_message(what.to_string());
    }

    /// Removes the spinner before the report is printed.
    pub fn clear(&self) {
        self.time_phase(None);
        self.bar.set_message("");
        self.bar.disable_steady_tick();
        self.bar.finish_and_clear();
    }

    /// Ends the phase under way (printing its time) and starts `next`.
    fn time_phase(&self, next: Option<&str>) {
        let Some(timing) = &self.timing else { return };
        let mut current = timing.borrow_mut();
        if let Some((what, began)) = current.take() {
            eprintln!("[timing] {:.1} s  {what}", began.elapsed().as_secs_f64());
        }
        *current = next.map(|what| (what.to_string(), Instant::now()));
    }
}
