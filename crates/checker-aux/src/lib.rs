//! Helpers of the `checker` binary that stand apart from checking itself:
//!
//! - [`mirror`]: a local HTTP server that plays a Fashion-MNIST mirror and counts
//!   downloads, so the checker can tell whether a program fetched the data once per node;
//! - [`hint`]: the help a stuck student gets, taken from the lab guide;
//! - [`reset`]: restoring a step crate to its starter, with a backup of the student's work.
pub mod hint;
pub mod mirror;
pub mod reset;

use std::path::PathBuf;

pub use hint::{book_location, book_page, check_hint_for, hint, BOOK_DIR};
pub use mirror::Mirror;
pub use reset::{reset, ResetOutcome};

/// The number of steps in the lab; valid steps are `0..STEPS`.
pub const STEPS: u8 = coursegen::STEPS.len() as u8;

/// Everything that can go wrong in hints and resets. Each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum AuxError {
    #[error("there is no step {step}: the lab's steps are 0 to {last}; pass one of those", last = STEPS - 1)]
    NoSuchStep { step: u8 },
    #[error(
        "cannot read the lab guide page {} ({source}); run the checker from the repository root, \
         or restore the page with `git checkout -- {}`",
        path.display(), path.display()
    )]
    GuideMissing { path: PathBuf, source: std::io::Error },
    #[error(
        "{} has no section \"{section}\"; restore the page with `git checkout -- {}`, \
         or read it directly",
        path.display(), path.display()
    )]
    SectionMissing { path: PathBuf, section: &'static str },
    #[error(
        "cannot work out the starter of step {step}: {source}; check that course/lab is intact \
         (`git status course/lab`)"
    )]
    Course { step: u8, source: coursegen::CourseError },
    #[error("cannot {action} {}: {source}; check the permissions and free space there", path.display())]
    Io { action: &'static str, path: PathBuf, source: std::io::Error },
}

impl AuxError {
    /// Returns a closure that wraps an I/O error with what was being done and where.
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> AuxError {
        let path = path.into();
        move |source| AuxError::Io { action, path, source }
    }
}

/// `step` itself, or [`AuxError::NoSuchStep`] if it is not one of the lab's.
pub(crate) fn check_step(step: u8) -> Result<u8, AuxError> {
    if step < STEPS {
        Ok(step)
    } else {
        Err(AuxError::NoSuchStep { step })
    }
}
