//! The lab's report: the epoch line rank 0 prints, images/sec, early stopping, and
//! the quick evaluation's summary.
use std::sync::{Mutex, MutexGuard};

use lab_trace::event;

use crate::perf::PerfSettings;

/// One epoch's figures, as rank 0 reports them: written as a struct with its fields
/// named, then [`record`](Self::record)ed.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EpochReport {
    /// The epoch, from 0.
    pub epoch: usize,
    /// Seconds since training started.
    pub cumulative_time: f64,
    /// Seconds this epoch's training took.
    pub epoch_time: f64,
    /// Images per second over all ranks (the sum of the per-rank figures).
    pub images_per_sec: f64,
    /// Mean validation loss over the validation batches.
    pub validation_loss: f64,
    /// Fraction of validation images classified correctly.
    pub validation_accuracy: f64,
}

impl EpochReport {
    /// Records these figures as this rank's report of its epoch (the trace, the run's
    /// history for the summary) and returns them. Every rank records its report (the
    /// checker compares them); rank 0 [`print`](Self::print)s it.
    ///
    /// ```
    /// let report = labkit::EpochReport {
    ///     epoch: 0,
    ///     cumulative_time: 12.5,
    ///     epoch_time: 12.5,
    ///     images_per_sec: 640.0,
    ///     validation_loss: 0.52,
    ///     validation_accuracy: 0.81,
    /// }
    /// .record();
    /// assert_eq!(report.epoch, 0);
    /// ```
    pub fn record(self) -> EpochReport {
        let EpochReport {
            epoch,
            cumulative_time,
            epoch_time,
            images_per_sec,
            validation_loss,
            validation_accuracy,
        } = self;
        crate::trace::record(event::EpochReport {
            epoch,
            cumulative_time,
            epoch_time,
            images_per_sec,
            validation_loss,
            validation_accuracy,
        });
        history().push(self);
        self
    }

    /// Reads an epoch line back (what the bench, the demo and the checker read from rank
    /// 0's output); `None` for any other line. The inverse of [`line`](Self::line), up
    /// to the digits the line rounds to.
    pub fn parse(line: &str) -> Option<EpochReport> {
        let rest = line.trim().strip_prefix("Epoch =")?;
        let (epoch, rest) = rest.split_once(':')?;
        let field = |name: &str| -> Option<f64> {
            let start = rest.find(&format!("{name} = "))? + name.len() + 3;
            rest[start..].split(',').next()?.trim().parse().ok()
        };
        Some(EpochReport {
            epoch: epoch.trim().parse().ok()?,
            cumulative_time: field("Cumulative Time")?,
            epoch_time: field("Epoch Time")?,
            images_per_sec: field("Images/sec")?,
            validation_loss: field("Validation Loss")?,
            validation_accuracy: field("Validation Accuracy")?,
        })
    }

    /// Whether `line` is an epoch line exactly as [`line`](Self::line) prints one.
    pub fn is_epoch_line(line: &str) -> bool {
        EpochReport::parse(line).is_some_and(|r| r.line() == line)
    }

    /// Prints [`line`](Self::line) on standard output.
    pub fn print(&self) {
        let line = self.line();
        println!("{line}");
        crate::trace::record(event::Printed { epoch: self.epoch, line, images_per_sec: self.images_per_sec });
    }

    /// The lab's epoch line, character for character:
    /// `Epoch =  1: Cumulative Time = 12.345, Epoch Time = 12.345, Images/sec = 652.1, Validation Loss = 0.412, Validation Accuracy = 0.851`.
    /// Images/sec is printed in full, as Python's `{}` prints a float.
    ///
    /// ```
    /// let report = labkit::EpochReport {
    ///     epoch: 1,
    ///     cumulative_time: 24.5,
    ///     epoch_time: 12.25,
    ///     images_per_sec: 652.5,
    ///     validation_loss: 0.4123,
    ///     validation_accuracy: 0.8512,
    /// };
    /// assert_eq!(
    ///     report.line(),
    ///     "Epoch =  1: Cumulative Time = 24.500, Epoch Time = 12.250, Images/sec = 652.5, \
    ///      Validation Loss = 0.412, Validation Accuracy = 0.851"
    /// );
    /// assert_eq!(labkit::EpochReport::parse(&report.line()).map(|r| r.epoch), Some(1));
    /// ```
    pub fn line(&self) -> String {
        format!(
            "Epoch = {:2}: Cumulative Time = {:5.3}, Epoch Time = {:5.3}, Images/sec = {}, Validation Loss = {:5.3}, Validation Accuracy = {:5.3}",
            self.epoch,
            self.cumulative_time,
            self.epoch_time,
            python_float(self.images_per_sec),
            self.validation_loss,
            self.validation_accuracy
        )
    }
}

fn history() -> MutexGuard<'static, Vec<EpochReport>> {
    // Process-wide: the lab's `EpochReport { .. }.record()` and `print_summary(&args.run,
    // target, world_size)` keep the lab's shape, with no history passed between them; the
    // checkpoint saves and restores it with the weights.
    static HISTORY: Mutex<Vec<EpochReport>> = Mutex::new(Vec::new());
    HISTORY.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a resumed run brought from its checkpoint: the validation accuracy of every
/// epoch trained before (epoch i at index i) and the time they took.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Restored {
    /// The validation accuracy of each epoch trained before.
    pub accuracies: Vec<f64>,
    /// Seconds those epochs took.
    pub total_time: f64,
}

fn restored() -> MutexGuard<'static, Restored> {
    static RESTORED: Mutex<Restored> = Mutex::new(Restored { accuracies: Vec::new(), total_time: 0.0 });
    RESTORED.lock().unwrap_or_else(|p| p.into_inner())
}

/// Called by `resume`: the summary then speaks for the whole run, not only for the
/// epochs this process trained.
pub(crate) fn restore(accuracies: &[f64], total_time: f64) {
    *restored() = Restored { accuracies: accuracies.to_vec(), total_time };
}

/// What the quick evaluation concludes from the epoch reports of this process.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Epochs trained.
    pub epochs: usize,
    /// Ranks in the job.
    pub world_size: usize,
    /// The best validation accuracy of any epoch.
    pub best_accuracy: f64,
    /// The first epoch (0-based, as the epoch lines print it) whose accuracy reached the target.
    pub reached_at: Option<usize>,
    /// Mean images/sec over the epochs after the first (the first pays for warm-up),
    /// or of the only epoch.
    pub images_per_sec: f64,
    /// Seconds of training in all.
    pub total_time: f64,
}

impl Summary {
    /// From this process's epoch reports so far, and the epochs a resumed run restored.
    pub fn from_reports(target_accuracy: f64, world_size: usize) -> Summary {
        Summary::of(&history(), &restored(), target_accuracy, world_size)
    }

    /// The summary of `reports`, after the `restored` epochs of an earlier process.
    /// Images/sec comes from this process's epochs only: the checkpoint does not keep it.
    /// (Crate-only: programs use [`from_reports`](Self::from_reports).)
    pub(crate) fn of(
        reports: &[EpochReport],
        restored: &Restored,
        target_accuracy: f64,
        world_size: usize,
    ) -> Summary {
        let accuracies =
            restored.accuracies.iter().copied().chain(reports.iter().map(|r| r.validation_accuracy));
        let best_accuracy = accuracies.fold(0.0, f64::max);
        let reached_at =
            restored.accuracies.iter().position(|a| *a >= target_accuracy).or_else(|| {
                reports.iter().find(|r| r.validation_accuracy >= target_accuracy).map(|r| r.epoch)
            });
        let steady: Vec<f64> = reports.iter().skip(1).map(|r| r.images_per_sec).collect();
        let steady =
            if steady.is_empty() { reports.iter().map(|r| r.images_per_sec).collect() } else { steady };
        let images_per_sec =
            if steady.is_empty() { 0.0 } else { steady.iter().sum::<f64>() / steady.len() as f64 };
        Summary {
            epochs: restored.accuracies.len() + reports.len(),
            world_size,
            best_accuracy,
            reached_at,
            images_per_sec,
            // A resumed run's cumulative time continues the restored one.
            total_time: reports.last().map(|r| r.cumulative_time).unwrap_or(restored.total_time),
        }
    }

    /// e.g. `Quick evaluation: 2 ranks, 3 epochs in 21.4 s, 612.5 images/sec; best validation accuracy 0.912, target 0.850 reached at epoch 2`.
    pub fn line(&self, target_accuracy: f64) -> String {
        let reached = match self.reached_at {
            Some(epoch) => format!("target {target_accuracy:.3} reached at epoch {epoch}"),
            None => format!("target {target_accuracy:.3} NOT reached"),
        };
        format!(
            "Quick evaluation: {} rank{}, {} epoch{} in {:.1} s, {:.1} images/sec; best validation accuracy {:.3}, {reached}",
            self.world_size,
            if self.world_size == 1 { "" } else { "s" },
            self.epochs,
            if self.epochs == 1 { "" } else { "s" },
            self.total_time,
            self.images_per_sec,
            self.best_accuracy
        )
    }
}

/// The quick evaluation's last line, on rank 0: how far the run got, how fast, and
/// whether it reached the target accuracy. On a GPU also the model FLOPs utilisation,
/// from `settings` (`&args.run` in a step program): the widths and `--peak-tflops`.
pub fn print_summary(settings: impl Into<PerfSettings>, target_accuracy: f64, world_size: usize) {
    let summary = Summary::from_reports(target_accuracy, world_size);
    let line = summary.line(target_accuracy);
    println!("{line}");
    let per_device = summary.images_per_sec / world_size.max(1) as f64;
    if let Some(mfu) = settings.into().mfu_line(per_device) {
        println!("{mfu}");
    }
    crate::trace::record(event::Summary {
        line,
        epochs: summary.epochs,
        best_accuracy: summary.best_accuracy,
        reached_at: summary.reached_at,
        images_per_sec: summary.images_per_sec,
    });
}

/// Python's `str(float)` for the values the lab prints: the shortest representation
/// that round-trips, always with a decimal point (Rust prints `652` for 652.0).
pub fn python_float(x: f64) -> String {
    let s = format!("{x}");
    if x.is_finite() && !s.contains('.') && !s.contains('e') {
        format!("{s}.0")
    } else {
        s
    }
}

/// A count as people read it, its thousands grouped: what step 14's lines say a rank
/// holds, and the checker's reports of them.
///
/// ```
/// assert_eq!(labkit::report::grouped(173_778), "173,778");
/// assert_eq!(labkit::report::grouped(-1_000), "-1,000");
/// assert_eq!(labkit::report::grouped(999), "999");
/// ```
pub fn grouped(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

/// Images per second on one rank: every batch of the epoch times the batch size,
/// divided by the epoch's time (as the lab computes it, counting the last partial
/// batch as full).
///
/// ```
/// // 100 batches of 32 images in 4 seconds.
/// assert_eq!(labkit::images_per_sec(100, 32, 4.0), 800.0);
/// ```
pub fn images_per_sec(batches: usize, batch_size: usize, epoch_time: f64) -> f64 {
    let value = if epoch_time <= 0.0 { 0.0 } else { (batches * batch_size) as f64 / epoch_time };
    crate::trace::record(event::ImagesPerSec { value, batches, batch_size });
    value
}

/// The lab's early stop: training ends once the last `patience` validation
/// accuracies are all at or above the target.
#[derive(Debug, Clone)]
///
/// ```
/// let mut early_stopping = labkit::EarlyStopping::new(0.85, 2);
/// assert!(!early_stopping.record(0.86)); // one epoch at the target
/// assert!(!early_stopping.record(0.84)); // the run starts again
/// assert!(!early_stopping.record(0.90));
/// assert!(early_stopping.record(0.87)); // two in a row: stop
/// ```
pub struct EarlyStopping {
    target: f64,
    patience: usize,
    history: Vec<f64>,
}

impl EarlyStopping {
    /// Stops once `patience` epochs in a row reach `target` accuracy (never when
    /// `patience` is 0).
    pub fn new(target: f64, patience: usize) -> Self {
        Self { target, patience, history: Vec::new() }
    }

    /// Records an epoch's validation accuracy; true when training should stop.
    pub fn record(&mut self, accuracy: f64) -> bool {
        self.history.push(accuracy);
        let stop = self.should_stop();
        // Every rank must decide alike: the checker compares what each one decided on.
        crate::trace::record(event::StopDecision { recorded: self.history.len(), accuracy, stop });
        stop
    }

    /// Whether the last `patience` accuracies all reached the target.
    pub fn should_stop(&self) -> bool {
        self.patience > 0
            && self.history.len() >= self.patience
            && self.history[self.history.len() - self.patience..].iter().all(|a| *a >= self.target)
    }

    /// Every accuracy recorded so far, in order.
    pub fn history(&self) -> &[f64] {
        &self.history
    }

    /// Puts back the history of a resumed run (the checkpoint's).
    pub fn restore(&mut self, history: &[f64]) {
        self.history = history.to_vec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(epoch: usize, cumulative_time: f64, images_per_sec: f64, accuracy: f64) -> EpochReport {
        EpochReport {
            epoch,
            cumulative_time,
            epoch_time: 10.0,
            images_per_sec,
            validation_loss: 0.5,
            validation_accuracy: accuracy,
        }
    }

    #[test]
    fn the_summary_of_a_resumed_run_covers_the_restored_epochs() {
        let fresh = [report(0, 10.0, 100.0, 0.80), report(1, 20.0, 300.0, 0.86)];
        let s = Summary::of(&fresh, &Restored::default(), 0.85, 2);
        assert_eq!((s.epochs, s.reached_at, s.best_accuracy, s.total_time), (2, Some(1), 0.86, 20.0));
        assert_eq!(s.images_per_sec, 300.0, "the first epoch is left out");
        // Resumed after epochs 0 and 1 (target reached at 1), trained epoch 2.
        let restored = Restored { accuracies: vec![0.80, 0.87], total_time: 20.0 };
        let s = Summary::of(&[report(2, 30.0, 250.0, 0.84)], &restored, 0.85, 2);
        assert_eq!((s.epochs, s.reached_at, s.best_accuracy, s.total_time), (3, Some(1), 0.87, 30.0));
        assert_eq!(s.images_per_sec, 250.0);
        // Resumed after an early stop: nothing trained, the saved result stands.
        let s = Summary::of(&[], &restored, 0.85, 2);
        assert_eq!((s.epochs, s.reached_at, s.total_time), (2, Some(1), 20.0));
        assert!(s.line(0.85).contains("2 epochs in 20.0 s") && s.line(0.85).contains("reached at epoch 1"));
    }

    #[test]
    fn epoch_line_matches_the_labs_format() {
        let r = EpochReport {
            epoch: 3,
            cumulative_time: 75.12345,
            epoch_time: 25.0,
            images_per_sec: 2564.25,
            validation_loss: 0.41234,
            validation_accuracy: 0.8519,
        };
        assert_eq!(
            r.line(),
            "Epoch =  3: Cumulative Time = 75.123, Epoch Time = 25.000, Images/sec = 2564.25, Validation Loss = 0.412, Validation Accuracy = 0.852"
        );
        let wide = EpochReport { epoch: 12, images_per_sec: 652.0, ..r };
        assert!(wide.line().starts_with("Epoch = 12: "));
        assert!(wide.line().contains("Images/sec = 652.0,"));
    }

    #[test]
    fn epoch_lines_read_back() {
        let line = "Epoch =  1: Cumulative Time = 12.345, Epoch Time = 6.100, Images/sec = 652.1234, Validation Loss = 0.412, Validation Accuracy = 0.851";
        let e = EpochReport::parse(line).unwrap();
        assert_eq!((e.epoch, e.cumulative_time, e.epoch_time), (1, 12.345, 6.1));
        assert_eq!((e.images_per_sec, e.validation_loss, e.validation_accuracy), (652.1234, 0.412, 0.851));
        assert_eq!(e.line(), line);
        assert!(EpochReport::is_epoch_line(line));
        assert!(EpochReport::parse("World size = 2; rendezvous at localhost:9956").is_none());
        assert!(EpochReport::parse("Epoch = x: garbage").is_none());
        // Parsable, but not as the lab prints it.
        assert!(!EpochReport::is_epoch_line(&line.replace("= 6.100", "= 6.1")));
        assert!(!EpochReport::is_epoch_line(&line.replace("Images/sec = 652.1234", "Images/sec = 652")));
    }

    #[test]
    fn python_floats() {
        assert_eq!(python_float(652.0), "652.0");
        assert_eq!(python_float(0.1 + 0.2), "0.30000000000000004");
        assert_eq!(python_float(1234.5), "1234.5");
    }

    #[test]
    fn images_per_sec_counts_batches_times_batch_size() {
        assert_eq!(images_per_sec(100, 32, 4.0), 800.0);
        assert_eq!(images_per_sec(100, 32, 0.0), 0.0);
    }

    #[test]
    fn early_stopping_needs_patience_epochs_at_target() {
        let mut s = EarlyStopping::new(0.85, 2);
        assert!(!s.record(0.86));
        assert!(!s.record(0.84));
        assert!(!s.record(0.85));
        assert!(s.record(0.90));
        let mut once = EarlyStopping::new(0.85, 1);
        assert!(once.record(0.85));
        let mut never = EarlyStopping::new(0.85, 0);
        assert!(!never.record(1.0));
    }
}
