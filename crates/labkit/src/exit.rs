//! How a program ends: the error printed, the roll call of the ranks still there after a
//! communication failure, and the exit code (2 for bad input, 1 otherwise).
use std::error::Error;
use std::process::ExitCode;
use std::time::Duration;

use tch_distributed as dist;

use crate::checkpoint::CheckpointError;
use crate::data::DataError;
use crate::error::{BoxError, Failure};
use crate::perfetto;

/// Ends `main`: prints the error, if any, and turns it into the exit code: 2 for bad
/// input (options, data files, arguments the process group refused), 1 otherwise.
pub fn finish<E: Into<BoxError>>(result: std::result::Result<(), E>) -> ExitCode {
    crate::revision::keep();
    // DDP_LAB_TIMELINE: this rank's timeline is complete (a spawned rank closes it
    // on its way out of `spawn` instead).
    perfetto::finish();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let e: BoxError = e.into();
            let code = exit_code(e.as_ref());
            eprintln!("error: {e}");
            if code != 2 && dist::is_initialized() && dist::diagnostics::is_communication_failure(e.as_ref())
            {
                if let Some(note) = dist::diagnostics::roll_call_note(ROLL_CALL_WAIT) {
                    eprintln!("error: {note}");
                }
            }
            ExitCode::from(code)
        }
    }
}

/// How long a failed rank waits for the other survivors to answer the roll call
/// that names the missing ranks (see [`dist::diagnostics::unresponsive_ranks`]).
const ROLL_CALL_WAIT: Duration = Duration::from_secs(2);

/// The exit code `e` ends a program with: what its type states ([`Failure`]), 2 for
/// bad input, 1 for everything else; 1 for an error of no lab type.
pub fn exit_code(e: &(dyn Error + 'static)) -> u8 {
    failure(e).map_or(1, Failure::exit_code)
}

/// `e` as the lab's error type it is, if any. Stable Rust cannot ask a `dyn Error`
/// whether its type implements a trait, only whether it is a given type: so each error
/// type of labkit and tch-distributed is named once, here, and states its code where it
/// is defined.
fn failure<'e>(e: &'e (dyn Error + 'static)) -> Option<&'e dyn Failure> {
    fn as_a<'e, F: Failure>(e: &'e (dyn Error + 'static)) -> Option<&'e dyn Failure> {
        e.downcast_ref::<F>().map(|f| f as &dyn Failure)
    }
    type AsFailure = for<'a> fn(&'a (dyn Error + 'static)) -> Option<&'a dyn Failure>;
    const LAB_ERRORS: [AsFailure; 3] = [as_a::<DataError>, as_a::<CheckpointError>, as_a::<dist::DistError>];
    LAB_ERRORS.iter().find_map(|as_failure| as_failure(e))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn code(e: impl Into<BoxError>) -> u8 {
        // As `finish` sees it: boxed.
        let e: BoxError = e.into();
        exit_code(e.as_ref())
    }

    #[test]
    fn bad_data_or_options_exit_with_2_and_failed_downloads_with_1() {
        assert_eq!(code(DataError::InvalidOption("--data-kind x".into())), 2);
        let gone =
            DataError::AllMirrorsFailed { file: "train-images-idx3-ubyte.gz".into(), failures: Vec::new() };
        assert_eq!(code(gone), 1);
    }

    #[test]
    fn unusable_checkpoints_exit_with_2_and_unwritable_ones_with_1() {
        let invalid = CheckpointError::Invalid {
            path: PathBuf::from("ckpt/checkpoint.json"),
            dir: PathBuf::from("ckpt"),
            reason: "the width differs".into(),
        };
        assert_eq!(code(invalid), 2);
        let io = CheckpointError::Io {
            action: "create",
            path: PathBuf::from("ckpt"),
            source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        };
        assert_eq!(code(io), 1);
    }

    #[test]
    fn refused_arguments_exit_with_2_and_communication_failures_with_1() {
        assert_eq!(code(dist::DistError::new(dist::ErrorKind::InvalidArgument, "rank 2 of 2")), 2);
        for kind in [dist::ErrorKind::Timeout, dist::ErrorKind::Network, dist::ErrorKind::RankFailed] {
            assert_eq!(code(dist::DistError::new(kind, "a rank is gone")), 1, "{kind:?}");
        }
    }

    #[test]
    fn errors_of_no_lab_type_exit_with_1() {
        assert_eq!(code("a message"), 1);
        assert_eq!(code(std::io::Error::from(std::io::ErrorKind::NotFound)), 1);
    }
}
