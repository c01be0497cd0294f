//! Fashion-MNIST held in memory as tensors, and batches gathered from it.
//!
//! The whole set is 55 MB of u8, so it is loaded once and batches are gathered from
//! memory by index: the samplers of the lab (DistributedSampler) hand out indices,
//! and [`Split::batch`] turns them into a float batch on the training device.

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
    /// is gathered on the device (an index upload and an `index_select`) instead of
    /// being copied from host memory.
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
    /// there; only the indices travel per batch.
    ///
    /// # Panics
    /// When an index is out of range (a sampler bug, not a data problem).
    pub fn batch(&self, indices: &[usize], device: Device) -> (Tensor, Tensor) {
        let len = self.len();
        if let Some(bad) = indices.iter().find(|&&i| i >= len) {
            panic!("batch index {bad} is out of range for a split of {len} samples");
        }
        let index: Vec<i64> = indices.iter().map(|&i| i as i64).collect();
        let index = Tensor::from_slice(&index);
        let on_host = || {
            (
                self.images.index_select(0, &index).to_device(device),
                self.labels.index_select(0, &index).to_device(device),
            )
        };
        let (images, labels) = match device {
            Device::Cpu => on_host(),
            _ => {
                let (resident_on, images, labels) = self
                    .resident
                    .get_or_init(|| (device, self.images.to_device(device), self.labels.to_device(device)));
                if *resident_on == device {
                    let index = index.to_device(device);
                    (images.index_select(0, &index), labels.index_select(0, &index))
                } else {
                    // A second device in one process (not the lab's case): from host memory.
                    on_host()
                }
            }
        };
        (images.to_kind(Kind::Float) / 255.0, labels)
    }
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
    /// `fashion-mnist.md5` when present, the published checksums otherwise).
    ///
    /// Checking on every load costs a fraction of a second and turns a corrupt or
    /// truncated file into an error that names it, instead of garbage training.
    pub fn load(dir: &Path) -> Result<FashionMnist, DataError> {
        FashionMnist::load_with(dir, &Manifest::for_dir(dir)?)
    }

    /// Like [`load`](Self::load), with the manifest given.
    pub fn load_with(dir: &Path, manifest: &Manifest) -> Result<FashionMnist, DataError> {
        let split = |images: &str, labels: &str| -> Result<Split, DataError> {
            let images_path = dir.join(images);
            let labels_path = dir.join(labels);
            let pixels = idx::decode_images(&manifest.verified_read(dir, images)?, &images_path)?;
            let labels = idx::decode_labels(&manifest.verified_read(dir, labels)?, &labels_path)?;
            let n_images = pixels.len() / idx::PIXELS;
            if n_images != labels.len() {
                return Err(DataError::Format {
                    path: labels_path,
                    problem: format!("{} labels for the {n_images} images of {images}", labels.len()),
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
        Ok(FashionMnist { train: split(TRAIN_IMAGES, TRAIN_LABELS)?, test: split(TEST_IMAGES, TEST_LABELS)? })
    }
}
