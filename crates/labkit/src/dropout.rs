//! The model's dropout, drawn cheaply on CPU.
//!
//! The lab drops 1% of the activations. libtorch's CPU dropout draws one Bernoulli
//! number per element from its Mersenne Twister, one element at a time (its fused
//! kernel is GPU-only): about 8 ms of a 90 ms narrow-model step on one CPU thread,
//! nearly all of it spent deciding to keep an element. Here the gaps between dropped
//! elements are drawn instead (geometric, so every element is still dropped
//! independently with probability p), about 1% as many draws, and the mask is
//! multiplied in as libtorch does, so autograd's backward is the same `grad * mask`.
//! The generator is seeded from libtorch's, so `tch::manual_seed` still makes runs
//! repeatable. GPUs, other dtypes and large rates go to libtorch's dropout.
use tch::{Device, Kind, Tensor};

use crate::rng::Rng;

/// Rates above this go to libtorch: skipping gains little when most elements drop.
const SKIP_SAMPLING_MAX_RATE: f64 = 0.25;

/// Dropout of rate `p` in training mode; the input itself (shared) otherwise.
pub fn dropout(xs: &Tensor, p: f64, train: bool) -> Tensor {
    if !train || p <= 0.0 {
        return xs.shallow_clone();
    }
    if xs.device() != Device::Cpu || xs.kind() != Kind::Float || p > SKIP_SAMPLING_MAX_RATE {
        return xs.dropout(p, train);
    }
    xs * mask(&xs.size(), p)
}

/// A float mask of `shape`: 0 with probability `p` per element, else `1 / (1 - p)`.
fn mask(shape: &[i64], p: f64) -> Tensor {
    let keep_scale = (1.0 / (1.0 - p)) as f32;
    let mask = Tensor::full(shape, f64::from(keep_scale), (Kind::Float, Device::Cpu));
    let len = mask.numel();
    // SAFETY: `mask` was just allocated here as a contiguous CPU float tensor of `len`
    // elements; nothing else refers to its storage while this slice lives.
    let values = unsafe { std::slice::from_raw_parts_mut(mask.data_ptr() as *mut f32, len) };
    let mut rng = Rng::new(torch_seed());
    let log_keep = (1.0 - p).ln();
    let mut position = 0usize;
    loop {
        // P(gap ≥ k) = P(u ≤ (1-p)^k) = (1-p)^k: k kept elements before the next drop.
        let gap = (rng.unit_open_closed().ln() / log_keep).floor();
        if gap >= (len - position) as f64 {
            break;
        }
        position += gap as usize;
        values[position] = 0.0;
        position += 1;
    }
    mask
}

/// A seed drawn from libtorch's default CPU generator.
fn torch_seed() -> u64 {
    Tensor::randint(i64::MAX, [1], (Kind::Int64, Device::Cpu)).int64_value(&[0]) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::torch_rng_lock;

    fn zeros_of(mask: &Tensor) -> Vec<bool> {
        Vec::<f32>::try_from(mask.flatten(0, -1)).unwrap().iter().map(|v| *v == 0.0).collect()
    }

    #[test]
    fn drops_each_element_with_probability_p_and_scales_the_rest() {
        let _rng = torch_rng_lock();
        tch::manual_seed(11);
        let n = 2_000_000usize;
        let p = 0.01;
        let out = dropout(&Tensor::ones([n as i64], (Kind::Float, Device::Cpu)), p, true);
        let values = Vec::<f32>::try_from(&out).unwrap();
        let scale = (1.0 / (1.0 - p)) as f32;
        assert!(values.iter().all(|v| *v == 0.0 || *v == scale), "values other than 0 and 1/(1-p)");
        let dropped: Vec<bool> = values.iter().map(|v| *v == 0.0).collect();
        // Binomial(n, p): sd = sqrt(n p (1-p)) ≈ 141; allow 5 sd, in each half too.
        let count = |s: &[bool]| s.iter().filter(|d| **d).count() as f64;
        let sd = (n as f64 * p * (1.0 - p)).sqrt();
        assert!((count(&dropped) - n as f64 * p).abs() < 5.0 * sd, "dropped {}", count(&dropped));
        let (a, b) = dropped.split_at(n / 2);
        for half in [a, b] {
            assert!((count(half) - n as f64 * p / 2.0).abs() < 5.0 * sd, "half dropped {}", count(half));
        }
        // Independence of neighbours: after a dropped element the next one is dropped
        // with probability p as well (expected 200 pairs here).
        let pairs = dropped.windows(2).filter(|w| w[0] && w[1]).count() as f64;
        assert!(
            (pairs - count(&dropped) * p).abs() < 5.0 * (count(&dropped) * p).sqrt() + 1.0,
            "pairs {pairs}"
        );
        // The gaps are geometric: P(gap = 0) = p, P(gap ≥ 100) = (1-p)^100 ≈ 0.366.
        let positions: Vec<usize> = dropped.iter().enumerate().filter(|(_, d)| **d).map(|(i, _)| i).collect();
        let long = positions.windows(2).filter(|w| w[1] - w[0] > 100).count() as f64;
        let share = long / (positions.len() - 1) as f64;
        assert!((share - 0.99f64.powi(100)).abs() < 0.02, "share of gaps ≥ 100: {share}");
    }

    #[test]
    fn backward_multiplies_by_the_same_mask() {
        let _rng = torch_rng_lock();
        tch::manual_seed(3);
        let xs = Tensor::randn([8, 4, 6, 6], (Kind::Float, Device::Cpu)).set_requires_grad(true);
        let out = dropout(&xs, 0.2, true);
        out.sum(Kind::Float).backward();
        let mask = &out / xs.detach();
        assert!(xs.grad().allclose(&mask, 1e-5, 1e-6, false), "gradient is not the mask");
        assert!(zeros_of(&out).iter().any(|d| *d), "no element dropped at p = 0.2");
    }

    #[test]
    fn repeatable_under_manual_seed_and_different_otherwise() {
        let _rng = torch_rng_lock();
        let draw = |seed| {
            tch::manual_seed(seed);
            zeros_of(&dropout(&Tensor::ones([100_000], (Kind::Float, Device::Cpu)), 0.01, true))
        };
        assert_eq!(draw(5), draw(5));
        assert_ne!(draw(5), draw(6));
        // Two calls in one run draw different masks.
        tch::manual_seed(5);
        let ones = Tensor::ones([100_000], (Kind::Float, Device::Cpu));
        assert_ne!(zeros_of(&dropout(&ones, 0.01, true)), zeros_of(&dropout(&ones, 0.01, true)));
    }

    #[test]
    fn evaluation_and_rate_zero_leave_the_input_alone() {
        let _rng = torch_rng_lock();
        let xs = Tensor::randn([3, 5], (Kind::Float, Device::Cpu));
        assert!(dropout(&xs, 0.01, false).equal(&xs));
        assert!(dropout(&xs, 0.0, true).equal(&xs));
    }

    #[test]
    fn other_dtypes_and_large_rates_use_libtorch() {
        let _rng = torch_rng_lock();
        tch::manual_seed(1);
        let bf16 = Tensor::ones([10_000], (Kind::BFloat16, Device::Cpu));
        let out = dropout(&bf16, 0.01, true);
        assert_eq!(out.kind(), Kind::BFloat16, "a bf16 activation stays bf16");
        let half = dropout(&Tensor::ones([100_000], (Kind::Float, Device::Cpu)), 0.5, true);
        let share = zeros_of(&half).iter().filter(|d| **d).count() as f64 / 100_000.0;
        assert!((share - 0.5).abs() < 0.01, "share dropped at p = 0.5: {share}");
    }
}
