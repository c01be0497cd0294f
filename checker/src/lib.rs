//! What the `checker` binary shares with its integration tests: the names of the
//! environment variables that steer it, so that both spell them from one place.

/// Another progress file than `.checker/progress.json` (the checker's own tests use one,
/// so they never touch a student's progress).
pub const PROGRESS_FILE_ENV: &str = "DDP_LAB_PROGRESS_FILE";

/// Points the checker at a bubblewrap binary (tests use it to make bwrap missing).
pub const BWRAP_ENV: &str = "DDP_LAB_BWRAP";

/// The repository to check, where the checker does not run from inside it.
pub const ROOT_ENV: &str = "DDP_LAB_ROOT";

/// A file to write each observation to, as JSON, before it is judged: how the judges'
/// fixtures (checker/fixtures/observations) are recorded.
pub const RECORD_OBSERVATION_ENV: &str = "DDP_LAB_RECORD_OBSERVATION";

/// Set (to anything): each phase of a verification (building, each run) prints its wall
/// time to stderr, for finding where grading's time goes (`bench`'s grading throughput).
pub const TIMINGS_ENV: &str = "DDP_LAB_TIMINGS";

/// The course that Gradescope's `run_autograder` grades with (default
/// `$AUTOGRADER_ROOT/source/ddp-lab`): a test points it at this repository.
pub const COURSE_ENV: &str = "DDP_LAB_COURSE";

/// The built checker `run_autograder` calls (default the course's
/// `target/debug/checker`): a test points it at the one it built.
pub const CHECKER_ENV: &str = "DDP_LAB_CHECKER";
