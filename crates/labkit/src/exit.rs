//! How a program ends: the error printed, the roll call of the ranks still there after a
//! communication failure, and the exit code (2 for bad input, 1 otherwise).
use std::error::Error;
use std::process::ExitCode;
use std::time::Duration;

use tch_distributed as dist;

use crate::checkpoint::CheckpointError;
use crate::data::DataError;
use crate::error::BoxError;
use crate::timeline;

/// Ends `main`: prints the error, if any, and turns it into the exit code: 2 for bad
/// input (options, data files, arguments the process group refused), 1 otherwise.
pub fn finish<E: Into<BoxError>>(result: std::result::Result<(), E>) -> ExitCode {
    // DDP_LAB_TIMELINE: this rank's timeline is complete (a spawned rank closes it
    // on its way out of `spawn` instead).
    timeline::finish();
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

/// 2 for bad input, 1 for everything else.
pub fn exit_code(e: &(dyn Error + 'static)) -> u8 {
    if let Some(data) = e.downcast_ref::<DataError>() {
        return data.exit_code() as u8;
    }
    if let Some(c) = e.downcast_ref::<CheckpointError>() {
        return c.exit_code() as u8;
    }
    if let Some(d) = e.downcast_ref::<dist::DistError>() {
        if d.kind() == dist::ErrorKind::InvalidArgument {
            return 2;
        }
    }
    1
}
