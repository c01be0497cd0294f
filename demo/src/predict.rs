//! What DDP should achieve on a bigger node: a ring all-reduce cost model of the
//! gradient buckets, against the single-device step time.
//!
//! Assumptions, stated once:
//! - DDP all-reduces float32 gradients (also under bf16 autocast: parameters and
//!   gradients stay float32) in buckets: the first holds up to 1 MiB, every later one
//!   up to 25 MiB (PyTorch's defaults). Buckets are cut at byte boundaries here; real
//!   ones end at parameter boundaries, a small difference.
//! - A ring all-reduce of B bytes over N devices moves 2(N−1)/N × B through each
//!   device's link, so it takes 2(N−1)/N × B / bandwidth (latency ignored: buckets are
//!   megabytes).
//! - Training ≈ 3 × forward: backward is 2/3 of the step. Buckets are reduced while
//!   backward still runs, so communication hides behind backward, except the last
//!   bucket, which can start only when backward ends.
//! - Exposed communication = max(last bucket's time, total time − backward time);
//!   step at N devices = single-device step + exposed; efficiency = single / that.
use std::fmt;

pub const MIB: u64 = 1 << 20;
/// PyTorch DDP's first bucket (`dist._DEFAULT_FIRST_BUCKET_BYTES`).
pub const FIRST_BUCKET_BYTES: u64 = MIB;
/// PyTorch DDP's `bucket_cap_mb` default.
pub const BUCKET_BYTES: u64 = 25 * MIB;
/// The lab's full-width WideResNet.
pub const LAB_PARAMETERS: u64 = 17_117_466;
/// Part of a training step that is backward (training ≈ 3 × forward).
pub const BACKWARD_SHARE: f64 = 2.0 / 3.0;

/// The gradient bytes of each bucket, in the order DDP reduces them.
pub fn buckets(parameters: u64) -> Vec<u64> {
    let mut left = parameters * 4;
    let mut out = Vec::new();
    let mut cap = FIRST_BUCKET_BYTES;
    while left > 0 {
        let b = left.min(cap);
        out.push(b);
        left -= b;
        cap = BUCKET_BYTES;
    }
    out
}

/// Seconds a ring all-reduce of `bytes` takes over `devices` at `bytes_per_sec` per link.
pub fn ring_seconds(bytes: u64, devices: usize, bytes_per_sec: f64) -> f64 {
    if devices <= 1 {
        return 0.0;
    }
    let n = devices as f64;
    2.0 * (n - 1.0) / n * bytes as f64 / bytes_per_sec
}

/// The model's answer for one node.
#[derive(Debug, Clone, PartialEq)]
pub struct Prediction {
    pub devices: usize,
    pub step_seconds: f64,
    pub buckets: Vec<u64>,
    pub comm_seconds: f64,
    pub exposed_seconds: f64,
    pub efficiency: f64,
}

pub fn predict(devices: usize, parameters: u64, step_seconds: f64, link_gb_per_s: f64) -> Prediction {
    let bw = link_gb_per_s * 1e9;
    let buckets = buckets(parameters);
    let comm_seconds: f64 = buckets.iter().map(|&b| ring_seconds(b, devices, bw)).sum();
    let last = buckets.last().map_or(0.0, |&b| ring_seconds(b, devices, bw));
    let exposed_seconds =
        if devices <= 1 { 0.0 } else { last.max(comm_seconds - BACKWARD_SHARE * step_seconds) };
    let efficiency = step_seconds / (step_seconds + exposed_seconds);
    Prediction { devices, step_seconds, buckets, comm_seconds, exposed_seconds, efficiency }
}

impl fmt::Display for Prediction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mib: Vec<String> =
            self.buckets.iter().map(|&b| format!("{:.2}", b as f64 / MIB as f64)).collect();
        writeln!(f, "gradient buckets (MiB, in reduction order): {}", mib.join(", "))?;
        writeln!(f, "single-device step: {:.2} ms (backward ≈ 2/3 of it)", self.step_seconds * 1e3)?;
        writeln!(
            f,
            "ring all-reduce per step over {} devices: {:.2} ms",
            self.devices,
            self.comm_seconds * 1e3
        )?;
        writeln!(f, "exposed (not hidden behind backward): {:.2} ms", self.exposed_seconds * 1e3)?;
        write!(
            f,
            "expected DDP efficiency: {:.1}% (speed-up {:.2}x on {} devices)",
            self.efficiency * 100.0,
            self.efficiency * self.devices as f64,
            self.devices
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lab_model_buckets() {
        // 17,117,466 × 4 = 68,469,864 B = 1 MiB + 25 MiB + 25 MiB + 14,992,488 B.
        let b = buckets(LAB_PARAMETERS);
        assert_eq!(b, vec![MIB, 25 * MIB, 25 * MIB, 68_469_864 - 51 * MIB]);
        assert_eq!(b[3], 14_992_488);
        assert_eq!(buckets(10), vec![40]);
        assert!(buckets(0).is_empty());
    }

    #[test]
    fn ring_cost_by_hand() {
        // 8 devices: 2 × 7/8 = 1.75; 1e9 B at 100 GB/s = 10 ms → 17.5 ms.
        assert!((ring_seconds(1_000_000_000, 8, 100e9) - 0.0175).abs() < 1e-12);
        // 2 devices: factor 1.
        assert!((ring_seconds(1_000_000, 2, 1e9) - 0.001).abs() < 1e-12);
        assert_eq!(ring_seconds(1_000_000, 1, 1e9), 0.0);
    }

    #[test]
    fn lab_model_on_8_devices_at_300_gb_per_s() {
        // Total 68,469,864 B × 1.75 / 300e9 = 0.399407540 ms; last bucket
        // 14,992,488 × 1.75 / 300e9 = 0.087456180 ms.
        let p = predict(8, LAB_PARAMETERS, 0.100, 300.0);
        assert!((p.comm_seconds - 0.000_399_407_54).abs() < 1e-11, "{}", p.comm_seconds);
        // A 100 ms step hides everything but the last bucket: 100 / 100.087456180.
        assert!((p.exposed_seconds - 0.000_087_456_18).abs() < 1e-11);
        assert!((p.efficiency - 0.100 / 0.100_087_456_18).abs() < 1e-9);
    }

    #[test]
    fn slow_link_exposes_what_backward_cannot_hide() {
        // 2 devices at 1 GB/s: comm = 68,469,864 B / 1e9 = 68.469864 ms; a 30 ms step has
        // 20 ms of backward, so 48.469864 ms show: efficiency 30 / 78.469864.
        let p = predict(2, LAB_PARAMETERS, 0.030, 1.0);
        assert!((p.comm_seconds - 0.068_469_864).abs() < 1e-12);
        assert!((p.exposed_seconds - 0.048_469_864).abs() < 1e-12);
        assert!((p.efficiency - 0.030 / 0.078_469_864).abs() < 1e-12);
    }

    #[test]
    fn one_device_is_fully_efficient() {
        let p = predict(1, LAB_PARAMETERS, 0.05, 10.0);
        assert_eq!(p.comm_seconds, 0.0);
        assert_eq!(p.efficiency, 1.0);
    }
}
