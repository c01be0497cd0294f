//! The lab's two calls for its data: `prepare_dataset` makes the data set ready on disk
//! (once per node), `load_dataset` reads it (every rank). The work itself is `data`'s;
//! these add the line the lab prints and the trace the checker reads.
use lab_trace::event;

use crate::data::{
    ensure_dataset, load_ready_first, DataError, DatasetOptions, DatasetReady, FashionMnist, Split,
};
use crate::error::Result;
use crate::{probes, trace};

/// The lab's "download" half: makes the data set ready on disk (verify, download or
/// generate; see [`ensure_dataset`]) and prints what it did. Call it once per node,
/// from local rank 0, before the barrier.
///
/// ```
/// use labkit::{DatasetKind, DatasetOptions, GenerateOptions};
///
/// let dir = std::env::temp_dir().join(format!("labkit-doc-prepare-{}", std::process::id()));
/// // The generated stand-in, small: nothing is downloaded.
/// let generated = GenerateOptions { train: 100, test: 20, seed: 0 };
/// let options = DatasetOptions { dir: dir.clone(), kind: DatasetKind::Generated, generated, ..Default::default() };
/// let ready = labkit::prepare_dataset(&options)?; // prints what it did
/// assert_eq!(ready.kind_used, DatasetKind::Generated);
/// # std::fs::remove_dir_all(dir)?;
/// # Ok::<(), labkit::BoxError>(())
/// ```
pub fn prepare_dataset(options: &DatasetOptions) -> Result<DatasetReady, DataError> {
    crate::revision::keep();
    trace::record(event::PrepareDataset { dir: path_text(&options.dir), kind: options.kind.into() });
    probes::before_preparing_data();
    let ready = ensure_dataset(options)?;
    println!("{}", ready.summary());
    trace::record(event::DatasetReady {
        dir: path_text(&ready.dir),
        kind_used: ready.kind_used.into(),
        action: ready.action,
        downloaded: ready.downloaded.iter().map(|f| f.to_string()).collect(),
    });
    Ok(ready)
}

/// The lab's "read" half: loads the data set [`prepare_dataset`] made ready (the same
/// copy: see [`load_ready`](crate::load_ready)), without downloading anything, and keeps the first
/// `train_subset` / `test_subset` samples.
///
/// Fails with a message saying the files are missing when nobody prepared them yet:
/// that is what happens to a rank that does not wait at the barrier.
///
/// ```
/// use labkit::{DatasetKind, DatasetOptions, GenerateOptions};
///
/// let dir = std::env::temp_dir().join(format!("labkit-doc-load-{}", std::process::id()));
/// let generated = GenerateOptions { train: 100, test: 20, seed: 0 };
/// let options = DatasetOptions { dir: dir.clone(), kind: DatasetKind::Generated, generated, ..Default::default() };
/// // Nobody prepared it yet: the files are missing.
/// assert!(labkit::load_dataset(&options, None, None).is_err());
/// labkit::prepare_dataset(&options)?;
/// let (train, test) = labkit::load_dataset(&options, Some(50), None)?;
/// assert_eq!((train.len(), test.len()), (50, 20));
/// # std::fs::remove_dir_all(dir)?;
/// # Ok::<(), labkit::BoxError>(())
/// ```
pub fn load_dataset(
    options: &DatasetOptions,
    train_subset: Option<usize>,
    test_subset: Option<usize>,
) -> Result<(Split, Split), DataError> {
    // Before any file is opened: the checker compares when each rank began reading
    // with when its node's data was ready (step 5's barrier).
    trace::record(event::LoadDataset { dir: path_text(&options.dir) });
    // Only the samples kept are decompressed (every file is still checked).
    let (dir, FashionMnist { train, test }) = load_ready_first(options, train_subset, test_subset)?;
    trace::record(event::DatasetLoaded { dir: path_text(&dir), train: train.len(), test: test.len() });
    Ok((train, test))
}

/// A directory as the trace writes it.
fn path_text(dir: &std::path::Path) -> String {
    dir.to_string_lossy().into_owned()
}
