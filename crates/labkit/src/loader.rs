//! Batch iteration: samplers decide the order of indices, the loader gathers batches.
//!
//! The whole data set is in memory, so a "loader" is only a sampler plus a batch size
//! and a device; no worker threads are needed.
use tch::{Device, Kind, Tensor};
use tch_distributed as dist;

use crate::data::Split;

/// Decides which samples an epoch visits, and in which order (PyTorch's `Sampler`).
pub trait Sampler {
    /// Indices per epoch.
    fn len(&self) -> usize;
    /// True when an epoch visits nothing.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The indices of the next epoch.
    fn epoch_indices(&mut self) -> Vec<usize>;
}

/// Every index in order (PyTorch's `SequentialSampler`).
#[derive(Debug, Clone)]
pub struct SequentialSampler {
    len: usize,
}

impl SequentialSampler {
    /// Yields `0..dataset_len` in order, every epoch.
    pub fn new(dataset_len: usize) -> Self {
        SequentialSampler { len: dataset_len }
    }
}

impl Sampler for SequentialSampler {
    fn len(&self) -> usize {
        self.len
    }
    fn epoch_indices(&mut self) -> Vec<usize> {
        (0..self.len).collect()
    }
}

/// Every index once, in a new order each epoch (PyTorch's `RandomSampler`, which is
/// what `shuffle=True` gives). Every process draws the same orders: it knows nothing
/// of other ranks, which is why a distributed program needs a different sampler.
#[derive(Debug, Clone)]
pub struct RandomSampler {
    len: usize,
    seed: u64,
    epochs_drawn: u64,
}

impl RandomSampler {
    /// Draws its seed from torch's global generator, as PyTorch's `RandomSampler` does
    /// (`torch.empty((), dtype=torch.int64).random_()`), so `torch.manual_seed` (in a
    /// step program, `--seed`) decides the orders. PyTorch draws at every epoch; this
    /// sampler draws once, here, and shuffles epoch `e` with that seed + `e`, so that
    /// what the model draws in between (a per-rank initial seed, dropout) cannot make
    /// ranks' orders differ.
    pub fn new(dataset_len: usize) -> Self {
        let seed = Tensor::empty([0i64; 0], (Kind::Int64, Device::Cpu)).random_().int64_value(&[]) as u64;
        RandomSampler { len: dataset_len, seed, epochs_drawn: 0 }
    }
}

impl Sampler for RandomSampler {
    fn len(&self) -> usize {
        self.len
    }
    fn epoch_indices(&mut self) -> Vec<usize> {
        // One replica of PyTorch's shuffle with seed + epoch: a fresh order per epoch,
        // reproducible from run to run.
        let order = dist::DistributedSampler::new(
            self.len,
            1,
            0,
            dist::SamplerOptions {
                seed: self.seed.wrapping_add(self.epochs_drawn),
                ..dist::SamplerOptions::default()
            },
        )
        .map(|s| s.indices())
        .unwrap_or_else(|_| (0..self.len).collect());
        self.epochs_drawn += 1;
        order
    }
}

impl Sampler for dist::DistributedSampler {
    fn len(&self) -> usize {
        dist::DistributedSampler::len(self)
    }
    fn epoch_indices(&mut self) -> Vec<usize> {
        // The order of the epoch set with `set_epoch`; calling this does not advance it.
        self.indices()
    }
}

/// Batches of one split, in the order its sampler gives (PyTorch's `DataLoader`).
/// The sampler is a public field so that the training loop can call
/// `train_loader.sampler.set_epoch(epoch)`.
pub struct DataLoader<'a, S> {
    /// The images and labels the batches come from.
    pub split: &'a Split,
    /// Which indices each epoch visits, in which order.
    pub sampler: S,
    /// Images per batch (the last batch of an epoch may be smaller).
    pub batch_size: usize,
    /// Where the batches' tensors are put.
    pub device: Device,
}

/// [`DataLoader::new`]'s keyword arguments, with PyTorch's defaults: batches of 1, on
/// the CPU.
///
/// ```
/// let options = labkit::LoaderOptions::default();
/// assert_eq!((options.batch_size, options.device), (1, tch::Device::Cpu));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoaderOptions {
    /// Images per batch (the last batch of an epoch may be smaller).
    pub batch_size: usize,
    /// Where the batches' tensors are put.
    pub device: Device,
}

impl Default for LoaderOptions {
    fn default() -> Self {
        LoaderOptions { batch_size: 1, device: Device::Cpu }
    }
}

impl<'a, S: Sampler> DataLoader<'a, S> {
    /// Batches of `split` in the order `sampler` gives, as PyTorch's
    /// `DataLoader(split, batch_size=..., sampler=...)`.
    ///
    /// ```
    /// use labkit::{DataLoader, LoaderOptions, SequentialSampler};
    /// use labkit::data::Split;
    ///
    /// let split = Split::from_raw(&vec![0u8; 10 * 784], &[0u8; 10]);
    /// let options = LoaderOptions { batch_size: 4, ..Default::default() };
    /// let loader = DataLoader::new(&split, SequentialSampler::new(10), options);
    /// assert_eq!(loader.len(), 3);
    /// ```
    ///
    /// # Panics
    /// When `options.batch_size` is 0.
    pub fn new(split: &'a Split, sampler: S, options: LoaderOptions) -> Self {
        let LoaderOptions { batch_size, device } = options;
        assert!(batch_size > 0, "the batch size must be at least 1");
        DataLoader { split, sampler, batch_size, device }
    }

    /// Batches per epoch (the last one may be partial), PyTorch's `len(loader)`.
    pub fn len(&self) -> usize {
        self.sampler.len().div_ceil(self.batch_size)
    }

    /// True when an epoch has no batch.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_sampler_reshuffles_each_epoch_and_covers_everything() {
        let _rng = crate::torch_rng_lock();
        tch::manual_seed(7);
        let mut s = RandomSampler::new(50);
        let a = s.epoch_indices();
        let b = s.epoch_indices();
        assert_ne!(a, b);
        for order in [&a, &b] {
            let mut sorted = order.clone();
            sorted.sort();
            assert_eq!(sorted, (0..50).collect::<Vec<_>>());
        }
        // torch.manual_seed decides the orders, as it does PyTorch's RandomSampler's.
        tch::manual_seed(7);
        assert_eq!(RandomSampler::new(50).epoch_indices(), a, "the same seed, the same orders");
        tch::manual_seed(8);
        assert_ne!(RandomSampler::new(50).epoch_indices(), a, "another seed, another order");
        // What draws from the generator after the sampler was made changes nothing.
        tch::manual_seed(7);
        let mut s = RandomSampler::new(50);
        let _ = Tensor::rand([10], (Kind::Float, Device::Cpu));
        assert_eq!((s.epoch_indices(), s.epoch_indices()), (a, b));
    }

    #[test]
    fn loader_length_counts_the_partial_batch() {
        let split = Split::from_raw(&vec![0u8; 10 * 784], &[0u8; 10]);
        let options = LoaderOptions { batch_size: 4, device: Device::Cpu };
        let loader = DataLoader::new(&split, SequentialSampler::new(10), options);
        assert_eq!(loader.len(), 3);
        let sampler = dist::DistributedSampler::new(10, 3, 2, dist::SamplerOptions::default()).unwrap();
        let loader = DataLoader::new(&split, sampler, options);
        assert_eq!(loader.len(), 1);
    }
}
