//! Fashion-MNIST held in memory as tensors, and batches gathered from it.
//!
//! The whole set is 55 MB of u8, so it is loaded once and batches are gathered from
//! memory by index: the samplers of the lab (DistributedSampler) hand out indices,
//! and [`Split::epoch_batches`] (or [`Split::batch`] for one batch) turns them into
//! float batches on the training device.

use std::path::Path;
use std::sync::OnceLock;

use tch::{Device, Kind, Tensor};

use super::idx::{self, SIDE};
use super::manifest::Manifest;
use super::{DataError, TEST_IMAGES, TEST_LABELS, TRAIN_IMAGES, TRAIN_LABELS};

/// Number of classes (T-shirt/top, trouser, pullover, dress, coat, sandal, shirt,
/// sneaker, bag, ankle boot).
pub const NUM_CLASSES: i64 = 10;

/// Class names, indexed by label.
pub const CLASS_NAMES: [&str; 10] = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
];

/// One split (train or test) of the data set.
#[derive(Debug)]
pub struct Split {
    /// Pixels as stored, `Uint8 [N, 1, 28, 28]` on the CPU.
    pub images: Tensor,
    /// Class labels, `Int64 [N]` on the CPU.
    pub labels: Tensor,
    /// The split copied to a GPU on its first batch there, so that every later batch
    /// is gathered on the device (an `index_select`) instead of being copied from host
    /// memory.
    resident: OnceLock<(Device, Tensor, Tensor)>,
}

impl Split {
    /// Builds a split from raw pixels (`N * 784`) and labels (`N`).
    ///
    /// # Panics
    /// When the lengths disagree; [`FashionMnist::load`] checks files before this.
    pub fn from_raw(pixels: &[u8], labels: &[u8]) -> Split {
        assert_eq!(pixels.len(), labels.len() * idx::PIXELS, "one 28x28 image per label");
        let n = labels.len() as i64;
        let images = Tensor::from_slice(pixels).view([n, 1, SIDE as i64, SIDE as i64]);
        let labels = Tensor::from_slice(labels).to_kind(Kind::Int64);
        Split { images, labels, resident: OnceLock::new() }
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.labels.size()[0] as usize
    }

    /// True when the split holds no samples.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The first `n` samples (all of them when `n` exceeds the length), sharing
    /// memory with `self`. CPU runs train on such a subset to stay quick.
    pub fn subset(&self, n: usize) -> Split {
        let n = n.min(self.len()) as i64;
        Split {
            images: self.images.narrow(0, 0, n),
            labels: self.labels.narrow(0, 0, n),
            resident: OnceLock::new(),
        }
    }

    /// Gathers the samples at `indices` into a batch on `device`: images as
    /// `Float [B, 1, 28, 28]` scaled to [0, 1] (pixel / 255, no normalisation, as in
    /// the lab) and labels as `Int64 [B]`.
    ///
    /// On a GPU the whole split (uint8) is copied there once, and batches are gathered
    /// there; the indices travel with each call, a blocking copy. A training loop uses
    /// [`epoch_batches`](Self::epoch_batches), which uploads them once per epoch.
    ///
    /// # Panics
    /// When an index is out of range (a sampler bug, not a data problem).
    pub fn batch(&self, indices: &[usize], device: Device) -> (Tensor, Tensor) {
        self.check_indices(indices);
        let (images, labels) = self.source(device);
        let index = index_tensor(indices).to_device(images.device());
        gather(images, labels, &index, device)
    }

    /// An epoch's batches, in order: `indices` cut into batches of `batch_size` (the
    /// last one may be partial), each the same as [`batch`](Self::batch) of its indices.
    ///
    /// On a GPU the epoch's indices are uploaded once, here, and every batch is a
    /// device-side slice of them followed by an `index_select` on the resident split:
    /// nothing is copied from the host per batch, so the CPU never waits for the GPU's
    /// queue to drain between training steps (the PyTorch reference does the same).
    ///
    /// # Panics
    /// When an index is out of range, or `batch_size` is 0.
    pub fn epoch_batches(&self, indices: &[usize], batch_size: usize, device: Device) -> EpochBatches<'_> {
        assert!(batch_size > 0, "the batch size must be at least 1");
        self.check_indices(indices);
        let (images, labels) = self.source(device);
        EpochBatches {
            images,
            labels,
            index: index_tensor(indices).to_device(images.device()),
            device,
            batch_size: batch_size as i64,
            next: 0,
            len: indices.len() as i64,
        }
    }

    fn check_indices(&self, indices: &[usize]) {
        let len = self.len();
        if let Some(bad) = indices.iter().find(|&&i| i >= len) {
            panic!("batch index {bad} is out of range for a split of {len} samples");
        }
    }

    /// Where batches for `device` are gathered from: the split resident on that GPU
    /// (copied there on first use), or host memory (the CPU, or a second GPU in one
    /// process, which is not the lab's case).
    fn source(&self, device: Device) -> (&Tensor, &Tensor) {
        if device == Device::Cpu {
            return (&self.images, &self.labels);
        }
        let (resident_on, images, labels) = self
            .resident
            .get_or_init(|| (device, self.images.to_device(device), self.labels.to_device(device)));
        if *resident_on == device {
            (images, labels)
        } else {
            (&self.images, &self.labels)
        }
    }
}

/// One epoch's batches of a split; see [`Split::epoch_batches`].
#[derive(Debug)]
pub struct EpochBatches<'a> {
    /// The split where batches are gathered (resident on the GPU, or on the host).
    images: &'a Tensor,
    labels: &'a Tensor,
    /// The epoch's indices, `Int64`, on the same device as `images`.
    index: Tensor,
    /// Where batches are delivered.
    device: Device,
    batch_size: i64,
    next: i64,
    len: i64,
}

impl Iterator for EpochBatches<'_> {
    type Item = (Tensor, Tensor);

    fn next(&mut self) -> Option<(Tensor, Tensor)> {
        if self.next >= self.len {
            return None;
        }
        let n = self.batch_size.min(self.len - self.next);
        let index = self.index.narrow(0, self.next, n);
        self.next += n;
        Some(gather(self.images, self.labels, &index, self.device))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = ((self.len - self.next) as usize).div_ceil(self.batch_size as usize);
        (left, Some(left))
    }
}

impl ExactSizeIterator for EpochBatches<'_> {}

/// The batch at `index` (on the device of `images`), delivered on `device` as float
/// pixels in [0, 1] and labels. A host gather for a GPU copies the batch there.
fn gather(images: &Tensor, labels: &Tensor, index: &Tensor, device: Device) -> (Tensor, Tensor) {
    let images = images.index_select(0, index).to_device(device);
    let labels = labels.index_select(0, index).to_device(device);
    (images.to_kind(Kind::Float) / 255.0, labels)
}

#[cfg(test)]
thread_local! {
    /// Index tensors built from host memory on this thread: on a GPU each is one
    /// blocking host-to-device copy. Tests count them to see that `train` and `test`
    /// build one per epoch, not one per batch.
    pub(crate) static HOST_INDEX_TENSORS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// `indices` as an `Int64` tensor in host memory.
fn index_tensor(indices: &[usize]) -> Tensor {
    #[cfg(test)]
    HOST_INDEX_TENSORS.with(|n| n.set(n.get() + 1));
    let index: Vec<i64> = indices.iter().map(|&i| i as i64).collect();
    Tensor::from_slice(&index)
}

/// Fashion-MNIST (or its generated stand-in), both splits in memory.
#[derive(Debug)]
pub struct FashionMnist {
    /// 60,000 samples in the real data.
    pub train: Split,
    /// 10,000 samples in the real data.
    pub test: Split,
}

impl FashionMnist {
    /// Loads the four gz IDX files of `dir`, after checking each against the manifest
    /// that governs the directory ([`Manifest::for_dir`]: the directory's own
    /// `fashion-mnist.md5` when present, the published checksums otherwise), by content:
    /// any faithful recompression of the files is accepted.
    ///
    /// Checking on every load costs a fraction of a second and turns a corrupt or
    /// truncated file into an error that names it, instead of garbage training.
    pub fn load(dir: &Path) -> Result<FashionMnist, DataError> {
        FashionMnist::load_with(dir, &Manifest::for_dir(dir)?)
    }

    /// Like [`load`](Self::load), with the manifest given.
    pub fn load_with(dir: &Path, manifest: &Manifest) -> Result<FashionMnist, DataError> {
        FashionMnist::load_first(dir, manifest, None, None)
    }

    /// Like [`load_with`](Self::load_with), keeping only the first `train` / `test`
    /// samples of each split (all when `None`), as [`Split::subset`] would. A file whose
    /// `.gz` MD5 is the manifest's is decompressed only as far as those samples reach:
    /// a CPU run on a subset (every run of the checker) then starts in a fraction of
    /// the time, with every file still checked against the manifest.
    pub fn load_first(
        dir: &Path,
        manifest: &Manifest,
        train: Option<usize>,
        test: Option<usize>,
    ) -> Result<FashionMnist, DataError> {
        let split = |images: &str, labels: &str, first: Option<usize>| -> Result<Split, DataError> {
            let images_path = dir.join(images);
            let labels_path = dir.join(labels);
            let content = |file: &str, dims: usize, item_bytes: usize| match first {
                Some(n) => manifest.verified_content_prefix(dir, file, idx::prefix_len(dims, n, item_bytes)),
                None => manifest.verified_content(dir, file),
            };
            let (n_images, pixels) =
                idx::parse_first_images(&content(images, 3, idx::PIXELS)?, &images_path, first)?;
            let (n_labels, labels) = idx::parse_first_labels(&content(labels, 1, 1)?, &labels_path, first)?;
            if n_images != n_labels {
                return Err(DataError::Format {
                    path: labels_path,
                    problem: format!("{n_labels} labels for the {n_images} images of {images}"),
                    fix: manifest.fix_hint(),
                });
            }
            if let Some(bad) = labels.iter().find(|&&l| i64::from(l) >= NUM_CLASSES) {
                return Err(DataError::Format {
                    path: labels_path,
                    problem: format!("label {bad} is not a class (0..=9)"),
                    fix: manifest.fix_hint(),
                });
            }
            Ok(Split::from_raw(&pixels, &labels))
        };
        Ok(FashionMnist {
            train: split(TRAIN_IMAGES, TRAIN_LABELS, train)?,
            test: split(TEST_IMAGES, TEST_LABELS, test)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` images whose pixels differ from image to image, labels 0..9 in turn.
    fn varied_split(n: usize) -> Split {
        let pixels: Vec<u8> =
            (0..n * idx::PIXELS).map(|i| ((i * 7 + i / idx::PIXELS * 13) % 256) as u8).collect();
        let labels: Vec<u8> = (0..n).map(|i| (i % 10) as u8).collect();
        Split::from_raw(&pixels, &labels)
    }

    fn same(a: &(Tensor, Tensor), b: &(Tensor, Tensor)) -> bool {
        a.0.kind() == b.0.kind()
            && a.1.kind() == b.1.kind()
            && a.0.size() == b.0.size()
            && a.1.size() == b.1.size()
            && a.0.equal(&b.0)
            && a.1.equal(&b.1)
    }

    #[test]
    fn epoch_batches_are_the_batches_of_the_chunks_partial_last_included() {
        let split = varied_split(50);
        // Rank 1 of 3 gets 17 shuffled indices (one repeated from the start as padding).
        let indices =
            tch_distributed::DistributedSampler::new(50, 3, 1, tch_distributed::SamplerOptions::default())
                .unwrap()
                .indices();
        assert_eq!(indices.len(), 17);
        for batch_size in [1, 5, 16, 17, 64] {
            let expected: Vec<_> = indices.chunks(batch_size).map(|c| split.batch(c, Device::Cpu)).collect();
            let epoch = split.epoch_batches(&indices, batch_size, Device::Cpu);
            assert_eq!(epoch.len(), expected.len(), "batch size {batch_size}");
            let got: Vec<_> = epoch.collect();
            assert_eq!(got.len(), expected.len(), "batch size {batch_size}");
            for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
                assert!(same(g, e), "batch {i} of size {batch_size} differs");
            }
            // The last batch holds what is left (17 = 3 × 5 + 2 at size 5).
            let last = indices.len() - (expected.len() - 1) * batch_size;
            assert_eq!(got.last().unwrap().1.size(), vec![last as i64]);
        }
        // The batch is the data, scaled: image 3's pixels and label 3.
        let (images, labels) = split.epoch_batches(&[3, 0], 1, Device::Cpu).next().unwrap();
        assert_eq!(images.size(), vec![1, 1, 28, 28]);
        let raw = split.images.get(3).to_kind(Kind::Float) / 255.0;
        assert!(images.get(0).equal(&raw));
        assert_eq!(labels.int64_value(&[0]), 3);
    }

    #[test]
    fn an_empty_epoch_has_no_batch() {
        let split = varied_split(4);
        assert_eq!(split.epoch_batches(&[], 8, Device::Cpu).count(), 0);
        let (images, labels) = split.batch(&[], Device::Cpu);
        assert_eq!((images.size(), labels.size()), (vec![0, 1, 28, 28], vec![0]));
    }

    #[test]
    fn one_host_index_tensor_per_epoch() {
        let split = varied_split(20);
        let indices: Vec<usize> = (0..20).rev().collect();
        let before = HOST_INDEX_TENSORS.with(|n| n.get());
        assert_eq!(split.epoch_batches(&indices, 3, Device::Cpu).count(), 7);
        assert_eq!(HOST_INDEX_TENSORS.with(|n| n.get()) - before, 1);
    }

    #[test]
    #[should_panic(expected = "batch index 4 is out of range for a split of 4 samples")]
    fn an_index_out_of_range_is_refused_before_the_epoch_starts() {
        let _ = varied_split(4).epoch_batches(&[0, 4], 1, Device::Cpu);
    }
}
