//! The step programs' error and result types, below every other module so that any of
//! them can return a `labkit::Result`.
use std::error::Error;

/// Any error a step program can meet.
pub type BoxError = Box<dyn Error + Send + Sync + 'static>;
/// The step programs' result type.
pub type Result<T, E = BoxError> = std::result::Result<T, E>;
