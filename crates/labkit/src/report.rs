//! The lab's report: the epoch line rank 0 prints, images/sec, and early stopping.

/// One epoch's figures, as rank 0 reports them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EpochReport {
    pub epoch: usize,
    /// Seconds since training started.
    pub cumulative_time: f64,
    /// Seconds this epoch's training took.
    pub epoch_time: f64,
    /// Images per second over all ranks (the sum of the per-rank figures).
    pub images_per_sec: f64,
    pub validation_loss: f64,
    pub validation_accuracy: f64,
}

impl EpochReport {
    /// The lab's epoch line, character for character:
    /// `Epoch =  1: Cumulative Time = 12.345, Epoch Time = 12.345, Images/sec = 652.1, Validation Loss = 0.412, Validation Accuracy = 0.851`.
    /// Images/sec is printed in full, as Python's `{}` prints a float.
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

/// Images per second on one rank: every batch of the epoch times the batch size,
/// divided by the epoch's time (as the lab computes it, counting the last partial
/// batch as full).
pub fn images_per_sec(batches: usize, batch_size: usize, epoch_time: f64) -> f64 {
    if epoch_time <= 0.0 {
        return 0.0;
    }
    (batches * batch_size) as f64 / epoch_time
}

/// The lab's early stop: training ends once the last `patience` validation
/// accuracies are all at or above the target.
#[derive(Debug, Clone)]
pub struct EarlyStopping {
    target: f64,
    patience: usize,
    history: Vec<f64>,
}

impl EarlyStopping {
    pub fn new(target: f64, patience: usize) -> Self {
        Self { target, patience, history: Vec::new() }
    }

    /// Records an epoch's validation accuracy; true when training should stop.
    pub fn record(&mut self, accuracy: f64) -> bool {
        self.history.push(accuracy);
        self.should_stop()
    }

    pub fn should_stop(&self) -> bool {
        self.patience > 0
            && self.history.len() >= self.patience
            && self.history[self.history.len() - self.patience..].iter().all(|a| *a >= self.target)
    }

    pub fn history(&self) -> &[f64] {
        &self.history
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
