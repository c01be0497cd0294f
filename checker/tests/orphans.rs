//! No process of a run outlives the checker: `checker verify step 11 --solutions`
//! killed with SIGKILL, or interrupted with SIGINT, while its ranks run leaves nothing
//! behind (read in /proc). Rank 1 is stuck on purpose after its first epoch (labkit's
//! `DDP_LAB_STALL_RANK` hook) and the test strikes then: the other ranks wait for it
//! up to their 60 s timeout, so the run cannot end on its own while the test watches
//! (nor fail early on the checker's data mirror, which dies with the checker).
//! Every process of a run inherits an environment variable unique to the test, which
//! is how /proc tells it from anything else.
mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const MARK: &str = "CHECKER_TEST_RUN";

/// One checker at a time: two checkers verifying the same step side by side share the
/// repository's run and data directories, and a killed one could disturb the other's
/// run, which then ends on its own with 1 instead of 130.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The checker verifying solution 11, once at least three `solution_11` processes of
/// it run (the self-spawning parent and two or more ranks).
fn checker_with_ranks_running(marker: &str) -> Child {
    let progress = std::env::temp_dir().join(format!("checker-test-progress-{marker}.json"));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_checker"));
    cmd.current_dir(common::repo())
        .args(["verify", "step", "11", "--solutions", "--seed", "3"])
        .env(checker::PROGRESS_FILE_ENV, progress)
        .env(labkit::STALL_RANK_ENV, "1")
        .env(MARK, marker)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // As from a terminal: a test run in the background (bash `&`, nohup) inherits SIGINT
    // and SIGHUP ignored, and a launcher rightly keeps an ignored signal ignored.
    // SAFETY: signal(2) between fork and exec is async-signal-safe.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGHUP, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut checker = cmd.spawn().unwrap();
    let start = Instant::now();
    loop {
        let ranks = child_process::processes_with_env(MARK, marker)
            .into_iter()
            // The program itself, not a build that links it (its path is the first word).
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                    c.split(|&b| b == 0).next().is_some_and(|argv0| argv0.ends_with(b"/solution_11"))
                })
            })
            .count();
        if ranks >= 3 && main_run_stuck(checker.id()) {
            return checker;
        }
        if start.elapsed() > Duration::from_secs(300) || checker.try_wait().unwrap().is_some() {
            let _ = checker.kill();
            panic!("the checker never ran three solution_11 processes with rank 1 stuck");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether the checker `pid`'s main run says its rank 1 is stuck (the checker writes
/// it to `.checker/runs/solution_11-<time>-<pid>/node0.stderr`).
fn main_run_stuck(pid: u32) -> bool {
    let runs = common::repo().join(".checker/runs");
    let suffix = format!("-{pid}");
    std::fs::read_dir(runs).into_iter().flatten().flatten().any(|run| {
        let name = run.file_name().to_string_lossy().into_owned();
        name.starts_with("solution_11-")
            && name.ends_with(&suffix)
            && std::fs::read_to_string(run.path().join("node0.stderr"))
                .is_ok_and(|text| text.contains("stuck on purpose"))
    })
}

fn assert_nothing_left(marker: &str, after: &str) {
    let left = child_process::wait_until_no_process_with_env(MARK, marker, Duration::from_secs(5));
    assert!(left.is_empty(), "{after}, still running after 5 s: {left:#?}");
}

#[test]
fn kill_9_of_the_checker_leaves_no_rank_running() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let marker = format!("kill9-{}", std::process::id());
    let mut checker = checker_with_ranks_running(&marker);
    // SAFETY: kill(2) of our own unreaped child.
    unsafe { libc::kill(checker.id() as i32, libc::SIGKILL) };
    checker.wait().unwrap();
    assert_nothing_left(&marker, "after kill -9 of the checker");
}

#[test]
fn ctrl_c_stops_every_rank_and_exits_130() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let marker = format!("sigint-{}", std::process::id());
    let mut checker = checker_with_ranks_running(&marker);
    // SAFETY: kill(2) of our own unreaped child.
    unsafe { libc::kill(checker.id() as i32, libc::SIGINT) };
    let status = checker.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{status}");
    assert_nothing_left(&marker, "after SIGINT to the checker");
}
