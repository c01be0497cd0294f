//! `torch.utils.data.distributed.DistributedSampler`, reproduced index for index.
//!
//! Data-parallel training gives every rank its own slice of the dataset. Which slice
//! must not depend on anything but (dataset length, world size, rank, seed, epoch), so
//! that every rank computes the same global order without talking to the others, and
//! so that a Rust run sees exactly the samples a PyTorch run would. The global order is
//! PyTorch's `randperm` driven by PyTorch's CPU generator, so both are reimplemented
//! here bit for bit rather than taken from libtorch: no tensor, no allocation in C++,
//! and the arithmetic is visible and testable.
use crate::error::{DistError, ErrorKind, Result};

/// Splits `0..dataset_len` among `num_replicas` ranks the way PyTorch's
/// `DistributedSampler` does, and yields this rank's share.
///
/// * Every rank gets the same number of indices, [`len`](Self::len). Without
///   `drop_last` the list is padded by repeating it from its start (so a few samples
///   are seen twice per epoch); with `drop_last` the tail that does not divide evenly
///   is cut off (so a few samples are not seen this epoch).
/// * With `shuffle`, the order is a permutation seeded by `seed + epoch`: call
///   [`set_epoch`](Self::set_epoch) at the start of every epoch, or every epoch repeats
///   the same order.
/// * Rank `r` takes every `num_replicas`-th index starting at position `r`, so the
///   shares are disjoint apart from the padding.
///
/// ```
/// use tch_distributed::{DistributedSampler, SamplerOptions};
///
/// # fn main() -> tch_distributed::Result<()> {
/// let options = SamplerOptions { shuffle: false, ..SamplerOptions::default() };
/// let mut sampler = DistributedSampler::new(10, 4, 1, options)?;
/// // 10 indices, padded to 12, rank 1 of 4 takes positions 1, 5, 9.
/// assert_eq!(sampler.indices(), vec![1, 5, 9]);
/// for epoch in 0..2 {
///     sampler.set_epoch(epoch);
///     for idx in &sampler {
///         assert!(idx < 10);
///     }
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistributedSampler {
    dataset_len: usize,
    num_replicas: usize,
    rank: usize,
    shuffle: bool,
    seed: u64,
    drop_last: bool,
    epoch: u64,
    num_samples: usize,
    total_size: usize,
}

/// The keyword arguments of PyTorch's `DistributedSampler`, with its defaults:
/// `shuffle = true`, `seed = 0`, `drop_last = false`. Name the ones that differ:
///
/// ```
/// use tch_distributed::SamplerOptions;
///
/// let options = SamplerOptions { seed: 42, ..SamplerOptions::default() };
/// assert!(options.shuffle && !options.drop_last);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SamplerOptions {
    /// A new order every epoch (seeded by `seed + epoch`); otherwise `0..dataset_len`.
    pub shuffle: bool,
    /// The seed of the shuffle; every rank must use the same.
    pub seed: u64,
    /// Cut off the tail that does not divide among the ranks, instead of padding.
    pub drop_last: bool,
}

impl Default for SamplerOptions {
    fn default() -> Self {
        Self { shuffle: true, seed: 0, drop_last: false }
    }
}

impl DistributedSampler {
    /// A sampler for `rank` of `num_replicas` over a dataset of `dataset_len` items, with
    /// PyTorch's keyword arguments in `options` (`SamplerOptions::default()` for PyTorch's
    /// defaults).
    ///
    /// Fails with [`ErrorKind::InvalidArgument`] when `num_replicas` is 0 or `rank` is
    /// not below it.
    pub fn new(
        dataset_len: usize,
        num_replicas: usize,
        rank: usize,
        options: SamplerOptions,
    ) -> Result<Self> {
        let SamplerOptions { shuffle, seed, drop_last } = options;
        if num_replicas == 0 {
            return Err(DistError::new(
                ErrorKind::InvalidArgument,
                "DistributedSampler: num_replicas is 0, but it must be at least 1 \
                 (it is the world size: the number of ranks sharing the dataset)",
            ));
        }
        if rank >= num_replicas {
            return Err(DistError::new(
                ErrorKind::InvalidArgument,
                format!(
                    "DistributedSampler: rank {rank} is out of range for num_replicas {num_replicas}; \
                     a rank must be in 0..={} (ranks count from 0)",
                    num_replicas - 1
                ),
            ));
        }
        // PyTorch: ceil((N - R) / R) when drop_last and R does not divide N, else
        // ceil(N / R). In the first case that is floor(N / R) (0 when N < R), and when R
        // divides N ceil and floor agree, so drop_last means floor, and integers give
        // the same numbers as PyTorch's float division.
        let num_samples =
            if drop_last { dataset_len / num_replicas } else { dataset_len.div_ceil(num_replicas) };
        Ok(Self {
            dataset_len,
            num_replicas,
            rank,
            shuffle,
            seed,
            drop_last,
            epoch: 0,
            num_samples,
            total_size: num_samples * num_replicas,
        })
    }

    /// PyTorch's defaults: `shuffle = true`, `seed = 0`, `drop_last = false`.
    pub fn with_defaults(dataset_len: usize, num_replicas: usize, rank: usize) -> Result<Self> {
        Self::new(dataset_len, num_replicas, rank, SamplerOptions::default())
    }

    /// Selects the epoch whose order [`indices`](Self::indices) returns. Only matters
    /// with `shuffle`; all ranks must pass the same value.
    pub fn set_epoch(&mut self, epoch: u64) {
        self.epoch = epoch;
    }

    /// The epoch last given to [`set_epoch`](Self::set_epoch) (0 initially).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// How many indices this rank yields per epoch (PyTorch's `num_samples`).
    pub fn len(&self) -> usize {
        self.num_samples
    }

    /// True when this rank yields nothing (an empty dataset, or `drop_last` with fewer
    /// items than ranks).
    pub fn is_empty(&self) -> bool {
        self.num_samples == 0
    }

    /// Indices over all ranks per epoch: `len() * num_replicas`.
    pub fn total_size(&self) -> usize {
        self.total_size
    }

    /// The number of items sampled from (`len(dataset)` in PyTorch).
    pub fn dataset_len(&self) -> usize {
        self.dataset_len
    }

    /// The number of ranks sharing the dataset.
    pub fn num_replicas(&self) -> usize {
        self.num_replicas
    }

    /// The rank whose share this sampler yields.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// This rank's indices for the current epoch, in the order PyTorch yields them.
    pub fn indices(&self) -> Vec<usize> {
        let order: Vec<usize> = if self.shuffle {
            // torch.Generator.manual_seed refuses values >= 2^64; only the low 32 bits
            // reach MT19937, and those are the same for the wrapped sum.
            randperm(self.dataset_len, self.seed.wrapping_add(self.epoch))
        } else {
            (0..self.dataset_len).collect()
        };
        // PyTorch pads by appending the order again from its start (cycling when the
        // padding is longer than the dataset, e.g. 1 item over 8 ranks), or truncates
        // with drop_last; either way position p of the padded list holds order[p % N].
        // Rank r takes positions r, r + R, r + 2R, ... below total_size.
        let n = order.len();
        (self.rank..self.total_size).step_by(self.num_replicas).map(|p| order[p % n]).collect()
    }

    /// Iterates this rank's indices for the current epoch (`for idx in &sampler` does
    /// the same).
    pub fn iter(&self) -> std::vec::IntoIter<usize> {
        self.indices().into_iter()
    }
}

impl IntoIterator for &DistributedSampler {
    type Item = usize;
    type IntoIter = std::vec::IntoIter<usize>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// `torch.randperm(n, generator=g)` for a CPU generator after `g.manual_seed(seed)`.
///
/// Below libtorch's threshold (`n < u32::MAX / 20`, i.e. n < 214,748,364) it is a
/// forward Fisher-Yates shuffle drawing one 32-bit output per step, taken modulo the
/// number of remaining slots (slightly biased, but that is what PyTorch does, so we do
/// too). From the threshold on libtorch switches to 64-bit draws and the "inside-out"
/// variant, which we follow as well; n = 214,748,363 and 214,748,364 were both checked
/// against torch 2.11 by hand (too slow for the test suite).
pub(crate) fn randperm(n: usize, seed: u64) -> Vec<usize> {
    let mut rng = Mt19937::new(seed);
    if (n as u64) < u64::from(u32::MAX / 20) {
        let mut r: Vec<usize> = (0..n).collect();
        for i in 0..n.saturating_sub(1) {
            let z = rng.next_u32() as usize % (n - i);
            r.swap(i, i + z);
        }
        r
    } else {
        let mut r = vec![0usize; n];
        for i in 0..n {
            let z = (rng.next_u64() % (i as u64 + 1)) as usize;
            r[i] = r[z];
            r[z] = i;
        }
        r
    }
}

/// The 32-bit Mersenne Twister (MT19937) as in PyTorch's CPU generator.
///
/// PyTorch seeds it from the low 32 bits of the 64-bit seed with the standard
/// initialisation; `random()` is one tempered output and `random64()` is two, the first
/// forming the high half.
pub(crate) struct Mt19937 {
    state: [u32; Self::N],
    next: usize,
}

impl Mt19937 {
    const N: usize = 624;
    const M: usize = 397;
    const MATRIX_A: u32 = 0x9908_b0df;
    const UPPER: u32 = 0x8000_0000;
    const LOWER: u32 = 0x7fff_ffff;

    pub(crate) fn new(seed: u64) -> Self {
        let mut state = [0u32; Self::N];
        state[0] = seed as u32; // truncation intended: PyTorch keeps the low 32 bits
        for j in 1..Self::N {
            let prev = state[j - 1];
            state[j] = 1_812_433_253u32.wrapping_mul(prev ^ (prev >> 30)).wrapping_add(j as u32);
        }
        Self { state, next: Self::N }
    }

    fn twist(&mut self) {
        // state[k] = state[k + M] ^ twist(upper bit of state[k], lower bits of state[k + 1]),
        // indices mod N, computed in place in increasing k.
        let s = &mut self.state;
        let mix = |upper: u32, lower: u32| {
            let y = (upper & Self::UPPER) | (lower & Self::LOWER);
            (y >> 1) ^ if y & 1 == 1 { Self::MATRIX_A } else { 0 }
        };
        for k in 0..Self::N - Self::M {
            s[k] = s[k + Self::M] ^ mix(s[k], s[k + 1]);
        }
        for k in Self::N - Self::M..Self::N - 1 {
            s[k] = s[k + Self::M - Self::N] ^ mix(s[k], s[k + 1]);
        }
        s[Self::N - 1] = s[Self::M - 1] ^ mix(s[Self::N - 1], s[0]);
        self.next = 0;
    }

    pub(crate) fn next_u32(&mut self) -> u32 {
        if self.next >= Self::N {
            self.twist();
        }
        let mut y = self.state[self.next];
        self.next += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        let hi = u64::from(self.next_u32());
        let lo = u64::from(self.next_u32());
        (hi << 32) | lo
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mt19937_matches_the_reference_sequence() {
        // The C++ standard requires the 10000th output of a default-seeded mt19937
        // (seed 5489) to be 4123659995.
        let mut rng = Mt19937::new(5489);
        let last = (0..10_000).map(|_| rng.next_u32()).last();
        assert_eq!(last, Some(4_123_659_995));
    }

    #[test]
    fn randperm_of_tiny_sizes() {
        assert!(randperm(0, 3).is_empty());
        assert_eq!(randperm(1, 3), vec![0]);
    }
}
