//! Fashion-MNIST for the lab: download with checksums, a generated stand-in for
//! offline machines, and the in-memory data set the training loop draws batches from.
//!
//! The lab program calls [`ensure_dataset`] once per node (local rank 0, before the
//! barrier) and then [`FashionMnist::load`] on every rank. See `data/README.md` at
//! the repository root for the files, the mirrors, and the environment variables.

mod dataset;
mod download;
mod error;
pub(crate) mod fsutil;
mod generated;
pub mod idx;
mod manifest;

use std::path::{Path, PathBuf};
use std::str::FromStr;

#[cfg(test)]
pub(crate) use dataset::HOST_INDEX_TENSORS;
pub use dataset::{EpochBatches, FashionMnist, Split, CLASS_NAMES, NUM_CLASSES};
pub use download::{download, resolve_mirrors, DownloadOptions, DEFAULT_MIRRORS};
pub use error::{DataError, MirrorFailure};
pub use fsutil::{DirLock, LOCK_FILE};
pub use generated::{generate, generate_split, GenerateOptions};
pub use manifest::{md5_file, md5_hex, Manifest, MANIFEST_FILE};

/// Training images.
pub const TRAIN_IMAGES: &str = "train-images-idx3-ubyte.gz";
/// Training labels.
pub const TRAIN_LABELS: &str = "train-labels-idx1-ubyte.gz";
/// Test images.
pub const TEST_IMAGES: &str = "t10k-images-idx3-ubyte.gz";
/// Test labels.
pub const TEST_LABELS: &str = "t10k-labels-idx1-ubyte.gz";
/// The four files of the data set.
pub const FILES: [&str; 4] = [TRAIN_IMAGES, TRAIN_LABELS, TEST_IMAGES, TEST_LABELS];

/// Environment variable: comma-separated mirror base URLs, used when the program
/// gives none (see [`DownloadOptions::mirrors`]).
pub const MIRROR_ENV: &str = "DDP_LAB_MIRROR";
/// Environment variable: path of an `md5sum`-style manifest that replaces the
/// published checksums for downloads (see [`DownloadOptions::expected`]).
pub const MANIFEST_ENV: &str = "DDP_LAB_MANIFEST";

/// Which data to use: `real` (the real Fashion-MNIST: verified, or downloaded),
/// `generated` (the generated stand-in: verified, or generated), or `auto` (the real
/// data when present or downloadable, the generated stand-in otherwise).
// The values carry no doc comments: clap would make them per-value help, and with
// it turn every option's `--help` into its long layout; `--dataset`'s help says it all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DatasetKind {
    Real,
    Generated,
    Auto,
}

/// For programs that take the kind as text (the demo, the benchmarks); clap parses
/// `--dataset` through `ValueEnum`, with the same names.
impl FromStr for DatasetKind {
    type Err = DataError;

    fn from_str(s: &str) -> Result<Self, DataError> {
        <DatasetKind as clap::ValueEnum>::from_str(s, true).map_err(|_| {
            DataError::InvalidOption(format!(
                "unknown dataset `{s}`: expected {}",
                crate::parsers::one_of::<DatasetKind>()
            ))
        })
    }
}

impl std::fmt::Display for DatasetKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&crate::parsers::value_name(self))
    }
}

/// What [`ensure_dataset`] had to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DatasetAction {
    /// All four files were already there and intact.
    Present,
    /// At least one file was downloaded.
    Downloaded,
    /// The stand-in was generated.
    Generated,
}

/// Where the data is and how it got there.
#[derive(Debug, Clone)]
pub struct DatasetReady {
    /// The directory holding the four files; pass it to [`FashionMnist::load`].
    pub dir: PathBuf,
    /// [`DatasetKind::Real`] or [`DatasetKind::Generated`], never `Auto`.
    pub kind_used: DatasetKind,
    pub action: DatasetAction,
    /// The files downloaded (empty unless `action` is `Downloaded`).
    pub downloaded: Vec<&'static str>,
    /// Why `Auto` fell back to the generated stand-in, for the caller to print.
    pub fallback_reason: Option<String>,
}

impl DatasetReady {
    /// A one-line account for the program's log, e.g.
    /// `dataset: generated stand-in in data/generated-seed0-60000-10000 (generated)`.
    pub fn summary(&self) -> String {
        let what = match self.kind_used {
            DatasetKind::Generated => "generated stand-in",
            _ => "Fashion-MNIST",
        };
        let action = match self.action {
            DatasetAction::Present => "already present",
            DatasetAction::Downloaded => "downloaded",
            DatasetAction::Generated => "generated",
        };
        let mut s = format!("dataset: {what} in {} ({action})", self.dir.display());
        if let Some(reason) = &self.fallback_reason {
            // The reason's first line ends with a colon when mirrors follow: show the
            // first mirror's answer too, which is usually the whole story (offline).
            let mut lines = reason.lines().map(str::trim).filter(|l| !l.is_empty());
            let mut why = lines.next().unwrap_or("").to_string();
            if why.ends_with(':') {
                why.push(' ');
                why.push_str(lines.next().unwrap_or(""));
            }
            s.push_str(&format!(
                "; the real Fashion-MNIST was unavailable ({why}), so this run uses the generated stand-in"
            ));
        }
        s
    }
}

/// Everything [`ensure_dataset`] needs.
#[derive(Debug, Clone)]
pub struct DatasetOptions {
    /// The data directory. The real files live directly in it; a generated stand-in
    /// in its subdirectory [`GenerateOptions::dir_name`].
    pub dir: PathBuf,
    pub kind: DatasetKind,
    /// Mirrors, timeout, progress bar and checksums for the real data.
    pub download: DownloadOptions,
    /// Sizes and seed of the generated stand-in.
    pub generated: GenerateOptions,
}

impl Default for DatasetOptions {
    fn default() -> Self {
        DatasetOptions {
            dir: PathBuf::from("data"),
            kind: DatasetKind::Auto,
            download: DownloadOptions::default(),
            generated: GenerateOptions::default(),
        }
    }
}

/// Makes the requested data set ready on disk, doing only what is missing, and says
/// what it used and did. This is the lab's "local rank 0 downloads" step: the other
/// ranks wait at the barrier and then load [`DatasetReady::dir`].
///
/// - `Real`: checks the four files against the checksums and downloads the missing
///   or damaged ones.
/// - `Generated`: checks the stand-in in `<dir>/generated-seed<seed>-<train>-<test>`
///   against its own manifest, and generates it when incomplete.
/// - `Auto`: `Real` when that succeeds; when the download fails, `Generated`, with
///   the reason in [`DatasetReady::fallback_reason`].
///
/// The directory being filled is locked meanwhile, so concurrent callers on one host
/// (other processes or threads) wait and then find the files present.
pub fn ensure_dataset(options: &DatasetOptions) -> Result<DatasetReady, DataError> {
    match options.kind {
        DatasetKind::Real => ensure_real(options),
        DatasetKind::Generated => ensure_generated(options, None),
        DatasetKind::Auto => match ensure_real(options) {
            Ok(ready) => Ok(ready),
            Err(e @ DataError::AllMirrorsFailed { .. }) => ensure_generated(options, Some(e.to_string())),
            Err(e) => Err(e),
        },
    }
}

fn ensure_real(options: &DatasetOptions) -> Result<DatasetReady, DataError> {
    let dir = &options.dir;
    let _lock = DirLock::acquire(dir)?;
    let downloaded = download::download_locked(dir, &options.download)?;
    let action = if downloaded.is_empty() { DatasetAction::Present } else { DatasetAction::Downloaded };
    Ok(DatasetReady {
        dir: dir.clone(),
        kind_used: DatasetKind::Real,
        action,
        downloaded,
        fallback_reason: None,
    })
}

fn ensure_generated(
    options: &DatasetOptions,
    fallback_reason: Option<String>,
) -> Result<DatasetReady, DataError> {
    let dir = options.dir.join(options.generated.dir_name());
    let _lock = DirLock::acquire(&dir)?;
    let action = if generated_is_complete(&dir) {
        DatasetAction::Present
    } else {
        generated::generate_locked(&dir, &options.generated)?;
        DatasetAction::Generated
    };
    Ok(DatasetReady {
        dir,
        kind_used: DatasetKind::Generated,
        action,
        downloaded: Vec::new(),
        fallback_reason,
    })
}

/// True when `dir` has a stand-in manifest and all four files match it.
fn generated_is_complete(dir: &Path) -> bool {
    match Manifest::read(&dir.join(MANIFEST_FILE)) {
        Ok(m) => m.is_generated() && FILES.iter().all(|f| m.file_is_valid(dir, f)),
        Err(_) => false,
    }
}
