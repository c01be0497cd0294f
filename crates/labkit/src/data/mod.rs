//! Fashion-MNIST for the lab: download with checksums, a generated stand-in for
//! offline machines, and the in-memory data set the training loop draws batches from.
//!
//! The lab program calls [`ensure_dataset`] once per node (local rank 0, before the
//! barrier) and then [`FashionMnist::load`] on every rank. See `data/README.md` at
//! the repository root for the files, the mirrors, and the environment variables.

mod download;
mod error;
pub(crate) mod fsutil;
mod generated;
pub mod idx;
mod in_memory;
mod manifest;

use std::path::{Path, PathBuf};
use std::str::FromStr;

pub use download::{download, resolve_mirrors, DownloadOptions, DEFAULT_MIRRORS};
pub use error::{DataError, MirrorFailure};
pub use fsutil::{DirLock, LOCK_FILE};
pub use generated::{generate, generate_split, GenerateOptions};
#[cfg(test)]
pub(crate) use in_memory::HOST_INDEX_TENSORS;
pub use in_memory::{EpochBatches, FashionMnist, Split, CLASS_NAMES, NUM_CLASSES};
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
/// Where Debian's package `dataset-fashion-mnist` installs the real data set (its
/// `.gz` files recompressed, their content the published data exactly).
pub const SYSTEM_DIR: &str = "/usr/share/datasets/fashion-mnist";
/// Environment variable: the system's data-set directory instead of [`SYSTEM_DIR`];
/// empty means none (see [`DatasetOptions::system_dir`]).
pub const SYSTEM_DIR_ENV: &str = "DDP_LAB_SYSTEM_DATA";

/// The system's copy of the real data to look in: `DDP_LAB_SYSTEM_DATA` when set
/// (empty: none), otherwise [`SYSTEM_DIR`].
pub fn system_dir() -> Option<PathBuf> {
    match std::env::var_os(SYSTEM_DIR_ENV) {
        Some(dir) if dir.is_empty() => None,
        Some(dir) => Some(PathBuf::from(dir)),
        None => Some(PathBuf::from(SYSTEM_DIR)),
    }
}

/// Which data to use: `real` (the real Fashion-MNIST: verified, or downloaded),
/// `generated` (the generated stand-in: verified, or generated), or `auto` (the real
/// data when present or downloadable, the generated stand-in otherwise).
// The values carry no doc comments: clap would make them per-value help, and with
// it turn every option's `--help` into its long layout; `--dataset`'s help says it all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
#[allow(missing_docs)]
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

/// The trace's name of the kind: the same three, by the same names.
impl From<DatasetKind> for lab_trace::DatasetKind {
    fn from(kind: DatasetKind) -> lab_trace::DatasetKind {
        match kind {
            DatasetKind::Real => lab_trace::DatasetKind::Real,
            DatasetKind::Generated => lab_trace::DatasetKind::Generated,
            DatasetKind::Auto => lab_trace::DatasetKind::Auto,
        }
    }
}

/// What [`ensure_dataset`] had to do: the trace's own enum, recorded as it is.
pub use lab_trace::DatasetAction;

/// Where the data is and how it got there.
#[derive(Debug, Clone)]
pub struct DatasetReady {
    /// The directory holding the four files; pass it to [`FashionMnist::load`].
    pub dir: PathBuf,
    /// [`DatasetKind::Real`] or [`DatasetKind::Generated`], never `Auto`.
    pub kind_used: DatasetKind,
    /// What preparing the data set did: found, downloaded or generated it.
    pub action: DatasetAction,
    /// The files downloaded (empty unless `action` is `Downloaded`).
    pub downloaded: Vec<&'static str>,
    /// Why `Auto` fell back to the generated stand-in, for the caller to print.
    pub fallback_reason: Option<String>,
    /// A file of the data directory that failed verification and was left as it is
    /// while another copy was used (e.g. the system's), for the caller to print.
    pub passed_over: Option<String>,
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
            DatasetAction::SystemCopy => "the system's copy, read in place",
            DatasetAction::Downloaded => "downloaded",
            DatasetAction::Generated => "generated",
        };
        let mut s = format!("dataset: {what} in {} ({action})", self.dir.display());
        if let Some(problem) = &self.passed_over {
            s.push_str(&format!("; passed over, and left as it is: {problem}"));
        }
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
    /// Which data: the real Fashion-MNIST, the generated stand-in, or whichever works.
    pub kind: DatasetKind,
    /// Mirrors, timeout, progress bar and checksums for the real data.
    pub download: DownloadOptions,
    /// Sizes and seed of the generated stand-in.
    pub generated: GenerateOptions,
    /// The system's copy of the real data (Debian's `dataset-fashion-mnist`), looked
    /// in after `dir` and before any download, and read in place (never written).
    /// Only while the published checksums are in force: a manifest given instead (a
    /// checker serving its own data from a mirror) describes other files. The default
    /// is [`system_dir`].
    pub system_dir: Option<PathBuf>,
}

impl Default for DatasetOptions {
    fn default() -> Self {
        DatasetOptions {
            dir: PathBuf::from("data"),
            kind: DatasetKind::Auto,
            download: DownloadOptions::default(),
            generated: GenerateOptions::default(),
            system_dir: system_dir(),
        }
    }
}

/// Makes the requested data set ready on disk, doing only what is missing, and says
/// what it used and did. This is the lab's "local rank 0 downloads" step: the other
/// ranks wait at the barrier and then load it with [`load_ready`].
///
/// - `Real`: the first complete, verified copy of the real data among the data
///   directory and the system's copy ([`DatasetOptions::system_dir`]); otherwise the
///   data directory's missing or damaged files are downloaded. A damaged file is only
///   ever replaced by a verified download, never deleted first.
/// - `Generated`: checks the stand-in in `<dir>/generated-seed<seed>-<train>-<test>`
///   against its own manifest, and generates it when incomplete.
/// - `Auto`: `Real` when that succeeds; when no verified copy is present and none can
///   be downloaded, `Generated`, with the reason in [`DatasetReady::fallback_reason`].
///
/// The directory being filled is locked meanwhile, so concurrent callers on one host
/// (other processes or threads) wait and then find the files present.
pub fn ensure_dataset(options: &DatasetOptions) -> Result<DatasetReady, DataError> {
    match options.kind {
        DatasetKind::Real => ensure_real(options),
        DatasetKind::Generated => ensure_generated(options, None),
        DatasetKind::Auto => match ensure_real(options) {
            Ok(ready) => Ok(ready),
            Err(e @ (DataError::AllMirrorsFailed { .. } | DataError::DamagedKept { .. })) => {
                ensure_generated(options, Some(e.to_string()))
            }
            Err(e) => Err(e),
        },
    }
}

/// The places a verified copy of the real data may be, in the order they are tried,
/// each with the manifest it is checked against: the data directory, then the system's
/// copy while the published checksums are in force. The data directory is checked
/// against the manifest in force when preparing (what a download would fetch), and
/// against the one it holds when loading (what was prepared).
fn real_candidates(options: &DatasetOptions, loading: bool) -> Result<Vec<(PathBuf, Manifest)>, DataError> {
    let expected = download::resolve_expected(&options.download)?;
    let own = if loading { Manifest::for_dir(&options.dir)? } else { expected.clone() };
    let mut candidates = vec![(options.dir.clone(), own)];
    if expected == Manifest::published() {
        if let Some(system) = options.system_dir.as_ref().filter(|s| **s != options.dir) {
            candidates.push((system.clone(), expected));
        }
    }
    Ok(candidates)
}

/// The first problem of `dir`'s four files under `manifest`, if any.
fn first_problem(dir: &Path, manifest: &Manifest) -> Option<DataError> {
    FILES.iter().find_map(|f| manifest.problem(dir, f))
}

fn ensure_real(options: &DatasetOptions) -> Result<DatasetReady, DataError> {
    let ready = |dir: PathBuf, action, downloaded, passed_over| DatasetReady {
        dir,
        kind_used: DatasetKind::Real,
        action,
        downloaded,
        fallback_reason: None,
        passed_over,
    };
    let candidates = real_candidates(options, false)?;
    // A complete, verified copy needs no lock: files only ever appear whole (renamed
    // into place), and the system's copy is never written.
    let mut passed_over = None;
    for (i, (dir, manifest)) in candidates.iter().enumerate() {
        match first_problem(dir, manifest) {
            None if i == 0 => return Ok(ready(dir.clone(), DatasetAction::Present, vec![], None)),
            None => return Ok(ready(dir.clone(), DatasetAction::SystemCopy, vec![], passed_over)),
            Some(DataError::Missing { .. }) => {}
            Some(problem) => passed_over = passed_over.or(Some(problem.to_string())),
        }
    }
    let dir = &options.dir;
    let _lock = DirLock::acquire(dir)?;
    let downloaded = download::download_locked(dir, &options.download)?;
    let action = if downloaded.is_empty() { DatasetAction::Present } else { DatasetAction::Downloaded };
    Ok(ready(dir.clone(), action, downloaded, None))
}

/// Loads what [`ensure_dataset`] made ready with the same `options`, from any rank:
/// the same copy it chose (the data directory's, the system's, or the generated
/// stand-in), found again by verifying, so ranks that did not prepare it need not be
/// told where it is. Returns its directory and the data.
///
/// A rank that loads before anyone prepared the data (one that did not wait at the
/// barrier) gets the error of the missing files.
pub fn load_ready(options: &DatasetOptions) -> Result<(PathBuf, FashionMnist), DataError> {
    load_ready_first(options, None, None)
}

/// [`load_ready`] keeping only the first `train` / `test` samples of each split (see
/// [`FashionMnist::load_first`]).
pub fn load_ready_first(
    options: &DatasetOptions,
    train: Option<usize>,
    test: Option<usize>,
) -> Result<(PathBuf, FashionMnist), DataError> {
    let generated = || {
        let dir = options.dir.join(options.generated.dir_name());
        let manifest = Manifest::for_dir(&dir)?;
        FashionMnist::load_first(&dir, &manifest, train, test).map(|data| (dir, data))
    };
    if options.kind == DatasetKind::Generated {
        return generated();
    }
    let mut first_error = None;
    for (dir, manifest) in real_candidates(options, true)? {
        match FashionMnist::load_first(&dir, &manifest, train, test) {
            Ok(data) => return Ok((dir, data)),
            Err(e @ (DataError::Missing { .. } | DataError::Checksum { .. } | DataError::Format { .. })) => {
                first_error = first_error.or(Some(e))
            }
            Err(e) => return Err(e),
        }
    }
    match (options.kind, first_error) {
        (DatasetKind::Auto, _) => generated(),
        (_, Some(e)) => Err(e),
        (_, None) => unreachable!("the data directory is always a candidate"),
    }
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
        passed_over: None,
    })
}

/// True when `dir` has a stand-in manifest and all four files match it.
fn generated_is_complete(dir: &Path) -> bool {
    match Manifest::read(&dir.join(MANIFEST_FILE)) {
        Ok(m) => m.is_generated() && FILES.iter().all(|f| m.file_is_valid(dir, f)),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The trace names a kind as `--dataset` does, so a recorded `prepare_dataset` reads
    /// as the option that was given.
    #[test]
    fn the_trace_names_each_kind_as_the_command_line_does() {
        for &kind in <DatasetKind as clap::ValueEnum>::value_variants() {
            assert_eq!(lab_trace::DatasetKind::from(kind).name(), kind.to_string());
        }
    }
}
