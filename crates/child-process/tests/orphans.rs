//! No process outlives its launcher. The launcher here is this test binary run again
//! (the `#[ignore]`d `launcher_entry`), which starts `sh` with two `sleep`s under it
//! (a child and two grandchildren) and waits; the test then kills it in various ways
//! and reads /proc for what is left. Every process of a run carries an environment
//! variable unique to it, which is how /proc tells them apart from everything else.
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const ROLE: &str = "LAUNCHER_TEST_ROLE";
const MARK: &str = "LAUNCHER_TEST_RUN";
/// A child that starts two grandchildren and waits for them.
const TREE: &str = "sleep 600 & sleep 600 & wait";

fn tree(marker: &str) -> Command {
    let mut cmd = Command::new("/bin/sh");
    cmd.args(["-c", TREE]).env(MARK, marker).stdin(Stdio::null());
    cmd
}

/// The launcher, when run by the tests below.
#[test]
#[ignore]
fn launcher_entry() {
    let Ok(role) = std::env::var(ROLE) else { return };
    let marker = std::env::var("LAUNCHER_TEST_MARKER").unwrap();
    if role == "signals" {
        child_process::stop_children_on_signals();
    }
    let child = if role == "thread" {
        // The thread that asks for the child ends at once: the child must not die of it.
        let marker = marker.clone();
        std::thread::spawn(move || child_process::spawn(tree(&marker)).unwrap()).join().unwrap()
    } else {
        child_process::spawn(tree(&marker)).unwrap()
    };
    println!("started {}", child.id());
    std::thread::sleep(Duration::from_secs(600));
}

fn marker(name: &str) -> String {
    format!("{name}-{}", std::process::id())
}

/// Starts this binary as the launcher; returns once its tree (sh and two sleeps) runs.
fn start_launcher(role: &str, marker: &str) -> std::process::Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["launcher_entry", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env("LAUNCHER_TEST_MARKER", marker)
        .stdout(Stdio::piped());
    // As from a terminal: a test run in the background (bash `&`, nohup) inherits SIGINT
    // and SIGHUP ignored, and the launcher rightly keeps an ignored signal ignored.
    // SAFETY: signal(2) between fork and exec is async-signal-safe.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGHUP, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut launcher = cmd.spawn().unwrap();
    let stdout = launcher.stdout.take().unwrap();
    let started = BufReader::new(stdout).lines().map_while(Result::ok).any(|l| l.contains("started "));
    assert!(started, "the launcher did not start its child");
    wait_for(Duration::from_secs(20), "the child and both grandchildren", || {
        child_process::processes_with_env(MARK, marker).len() == 3
    });
    launcher
}

fn wait_for(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Polls /proc for up to 5 s until no process of the run is left.
fn assert_nothing_left(marker: &str, after: &str) {
    let left = child_process::wait_until_no_process_with_env(MARK, marker, Duration::from_secs(5));
    for pid in left.iter().filter_map(|l| l.split(':').next()?.parse::<i32>().ok()) {
        // SAFETY: kill(2) of a process this test started (through its launcher).
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    assert!(left.is_empty(), "{after}, processes were left after 5 s: {left:?}");
}

fn signal(child: &std::process::Child, signal: i32) {
    // SAFETY: kill(2) of our own unreaped child.
    unsafe { libc::kill(child.id() as i32, signal) };
}

#[test]
fn kill_9_of_the_launcher_takes_its_child_and_grandchildren() {
    let marker = marker("kill9");
    let mut launcher = start_launcher("plain", &marker);
    signal(&launcher, libc::SIGKILL);
    launcher.wait().unwrap();
    assert_nothing_left(&marker, "after kill -9 of the launcher");
}

/// The kernel's death signal follows the thread that forked a child, not the process:
/// a child asked for on a thread that ended lives on, and still dies with the process.
#[test]
fn a_child_outlives_the_thread_that_asked_for_it_but_not_the_launcher() {
    let marker = marker("thread");
    let mut launcher = start_launcher("thread", &marker);
    // The thread has ended before "started" was printed; a child killed by that would
    // be gone by now (the kernel kills it as the thread exits).
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(child_process::processes_with_env(MARK, &marker).len(), 3, "the tree died with the thread");
    signal(&launcher, libc::SIGKILL);
    launcher.wait().unwrap();
    assert_nothing_left(&marker, "after kill -9 of the launcher");
}

#[test]
fn sigint_and_sigterm_stop_the_tree_and_exit_130_and_143() {
    for (sig, code) in [(libc::SIGINT, 130), (libc::SIGTERM, 143)] {
        let marker = marker(&format!("signal{sig}"));
        let mut launcher = start_launcher("signals", &marker);
        signal(&launcher, sig);
        let status = launcher.wait().unwrap();
        assert_eq!(status.code(), Some(code), "after signal {sig}: {status}");
        assert_nothing_left(&marker, &format!("after signal {sig}"));
    }
}

#[test]
fn a_timeout_kills_the_whole_group() {
    let marker = marker("timeout");
    let out = child_process::output(tree(&marker), Some(Duration::from_millis(500))).unwrap();
    assert!(out.timed_out && !out.success(), "{out:?}");
    assert_eq!(out.describe(), "timed out (killed)");
    assert_nothing_left(&marker, "after the timeout");
}

#[test]
fn dropping_a_child_kills_its_group() {
    let marker = marker("drop");
    let child = child_process::spawn(tree(&marker)).unwrap();
    wait_for(Duration::from_secs(20), "the tree", || {
        child_process::processes_with_env(MARK, &marker).len() == 3
    });
    drop(child);
    assert_nothing_left(&marker, "after dropping the child");
}

#[test]
fn what_a_child_leaves_in_its_group_is_killed_when_it_ends() {
    let marker = marker("left");
    let mut cmd = Command::new("/bin/sh");
    cmd.args(["-c", "sleep 600 & echo started; exit 3"]).env(MARK, &marker);
    let out = child_process::output(cmd, Some(Duration::from_secs(60))).unwrap();
    assert_eq!(out.describe(), "exit code 3");
    assert_eq!(out.stdout, "started\n");
    assert!(out.left_behind, "{out:?}");
    assert_nothing_left(&marker, "after the child ended");
}
