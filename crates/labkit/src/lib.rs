//! What the DDP lab hands students ready-made: the WideResNet model, Fashion-MNIST
//! (download, checksums, a generated stand-in), batch iteration, the lab's report
//! lines, and the trace the checker reads.
pub mod data;
pub mod model;
pub mod report;

pub use data::{
    download, ensure_dataset, generate, DataError, DatasetAction, DatasetKind, DatasetOptions, DatasetReady,
    DownloadOptions, FashionMnist, GenerateOptions, Manifest, Split,
};
pub use model::{parameter_count, Norm, WideResNet, Widths};
pub use report::{images_per_sec, EarlyStopping, EpochReport};
