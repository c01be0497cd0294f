//! What the checker is doing while it builds and runs: a spinner with the phase and
//! the time spent on a terminal; on a pipe or a file (a CI log, `verify 2>&1 | tee`), a
//! line per phase on stderr instead, so that a first build's minutes are not silence
//! (the report itself is stdout's alone). With [`checker::TIMINGS_ENV`] set, each phase's wall time goes to stderr
//! as it ends (`[timing] 6.4 s  running 3 rank(s)`): where grading's time goes.
use std::cell::RefCell;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

pub struct Spinner {
    bar: ProgressBar,
    /// Not a terminal: the step being worked on (`step 7`, or empty), each phase then
    /// written as a line of its own: a spinner's redraws would be noise in a log.
    lines: Option<RefCell<String>>,
    /// The phase under way and when it began, when timings are asked for.
    timing: Option<RefCell<Option<(String, Instant)>>>,
}

impl Spinner {
    /// A spinner on stderr, or a line per phase when stderr is not a terminal;
    /// nothing at all when `quiet` (steps run side by side).
    pub fn new(quiet: bool) -> Spinner {
        let timing = std::env::var_os(checker::TIMINGS_ENV).map(|_| RefCell::new(None));
        if quiet {
            return Spinner { bar: ProgressBar::hidden(), lines: None, timing };
        }
        if !std::io::stderr().is_terminal() {
            return Spinner { bar: ProgressBar::hidden(), lines: Some(RefCell::new(String::new())), timing };
        }
        let bar = ProgressBar::new_spinner();
        if let Ok(style) = ProgressStyle::with_template("{spinner} {prefix}: {msg} ({elapsed})") {
            bar.set_style(style);
        }
        bar.enable_steady_tick(Duration::from_millis(120));
        Spinner { bar, lines: None, timing }
    }

    /// Which step is being worked on.
    pub fn step(&self, step: u8) {
        if let Some(lines) = &self.lines {
            *lines.borrow_mut() = format!("step {step}: ");
        }
        self.bar.set_prefix(format!("step {step}"));
    }

    /// The phase: "building", "running 3 ranks", ...
    pub fn phase(&self, what: &str) {
        self.time_phase(Some(what));
        if let Some(lines) = &self.lines {
            eprintln!("checker: {}{what}", lines.borrow());
        }
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
