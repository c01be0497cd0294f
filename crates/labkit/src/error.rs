//! The step programs' error and result types, and the exit code each kind of failure
//! ends a program with; below every other module so that any of them can return a
//! `labkit::Result`.
use std::error::Error;

use tch_distributed as dist;

/// Any error a step program can meet.
pub type BoxError = Box<dyn Error + Send + Sync + 'static>;
/// The step programs' result type.
pub type Result<T, E = BoxError> = std::result::Result<T, E>;

/// An error that states the exit code a step program ends with, where the error type is
/// defined: 2 for bad input the user has to fix (an option, a data file, a checkpoint,
/// an argument the process group refused), 1 for everything else (the network, the
/// disk, a rank gone).
///
/// `labkit::finish` and spawned ranks read it through `labkit::exit_code`; a new error
/// type of labkit or tch-distributed implements this and joins the list there (no doc
/// link: this module sits below `exit`).
pub trait Failure: Error + 'static {
    /// 2 for bad input, 1 otherwise.
    fn exit_code(&self) -> u8;
}

/// tch-distributed states its codes itself ([`dist::DistError::exit_code`]); this only
/// lets labkit ask it the same way.
impl Failure for dist::DistError {
    fn exit_code(&self) -> u8 {
        dist::DistError::exit_code(self)
    }
}
