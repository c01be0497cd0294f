//! What the checker is doing while it builds and runs: a spinner with the phase and
//! the time spent on a terminal; nothing on a pipe or a file, where the report alone
//! is wanted.
use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

pub struct Spinner(ProgressBar);

impl Spinner {
    /// A spinner on stderr, hidden when stderr is not a terminal (or `quiet`).
    pub fn new(quiet: bool) -> Spinner {
        if quiet || !std::io::stderr().is_terminal() {
            return Spinner(ProgressBar::hidden());
        }
        let bar = ProgressBar::new_spinner();
        if let Ok(style) = ProgressStyle::with_template("{spinner} {prefix}: {msg} ({elapsed})") {
            bar.set_style(style);
        }
        bar.enable_steady_tick(Duration::from_millis(120));
        Spinner(bar)
    }

    /// Which step is being worked on.
    pub fn step(&self, step: u8) {
        self.0.set_prefix(format!("step {step}"));
    }

    /// The phase: "building", "running 3 ranks", ...
    pub fn phase(&self, what: &str) {
        self.0.set_message(what.to_string());
    }

    /// Removes the spinner before the report is printed.
    pub fn clear(&self) {
        self.0.set_message("");
        self.0.disable_steady_tick();
        self.0.finish_and_clear();
    }
}
