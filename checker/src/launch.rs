//! Building a step crate and starting its ranks: one process per rank with
//! `LOCAL_RANK` before step 10 (as torchrun does), one self-spawning invocation from
//! step 10. Every process is started through the `launcher` crate: it leads its own
//! process group, so that a timeout or a failure kills everything it started (spawned
//! ranks included), and it dies with the checker, however the checker ends.
use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// What building a crate gave.
pub enum Build {
    Binary(PathBuf),
    /// Compiler output, as cargo printed it.
    Failed(String),
}

/// `cargo build -p <package>` in the repository, or, with `manifest_dir`, of the
/// standalone crate there (sharing the repository's target directory); the binary's
/// path, or the errors.
pub fn build(root: &Path, package: &str, manifest_dir: Option<&Path>) -> std::io::Result<Build> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let target = target_dir(root);
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--quiet", "--color", "never", "-p", package]);
    match manifest_dir {
        Some(dir) => cmd
            .current_dir(dir)
            .arg("--manifest-path")
            .arg(dir.join("Cargo.toml"))
            .env("CARGO_TARGET_DIR", &target),
        None => cmd.current_dir(root),
    };
    // Through the launcher too: a checker stopped mid-build stops cargo and its rustcs.
    let out = launcher::output(cmd, None)?;
    if !out.success() {
        return Ok(Build::Failed(out.stderr));
    }
    Ok(Build::Binary(target.join("debug").join(package)))
}

fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"))
}

/// Where `cargo build -p package` puts the package's binary.
pub fn binary_path(root: &Path, package: &str) -> PathBuf {
    target_dir(root).join("debug").join(package)
}

/// Builds several packages of the workspace in one cargo run (one dependency check
/// instead of one per package). False when any of them fails: each is then built on
/// its own, so that the failure is reported with its step.
pub fn build_all(root: &Path, packages: &[String]) -> bool {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--quiet", "--color", "never"]).current_dir(root);
    for package in packages {
        cmd.args(["-p", package]);
    }
    launcher::output(cmd, None).is_ok_and(|out| out.success())
}

/// One process to start.
pub struct Launch {
    pub name: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

/// How a process ended.
#[derive(Debug, Clone)]
pub struct Ended {
    pub name: String,
    pub pid: u32,
    pub status: Option<ExitStatus>,
    pub timed_out: bool,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
    /// Processes of its group were still alive when it ended (and were killed then).
    pub left_behind: bool,
}

impl Ended {
    pub fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    /// e.g. "exit code 1", "killed by signal 9 (SIGKILL)", "timed out (killed)".
    pub fn describe(&self) -> String {
        match (self.timed_out, self.status) {
            (true, _) => "timed out (killed)".to_string(),
            (false, Some(status)) => launcher::describe(status),
            (false, None) => "did not start".to_string(),
        }
    }
}

/// Starts every process, waits for all of them up to `limit`, and kills the process
/// groups of those still running then. When one process fails, the others get
/// `grace` to end on their own (a distributed program should notice a dead peer)
/// before they are killed too.
pub fn run_all(bin: &Path, launches: &[Launch], dir: &Path, limit: Duration, grace: Duration) -> Vec<Ended> {
    let start = Instant::now();
    let mut running: Vec<(usize, launcher::Child, PathBuf, PathBuf)> = Vec::new();
    let mut ended: Vec<Option<Ended>> = launches.iter().map(|_| None).collect();
    for (i, launch) in launches.iter().enumerate() {
        let out_path = dir.join(format!("{}.stdout", launch.name));
        let err_path = dir.join(format!("{}.stderr", launch.name));
        let spawned = File::create(&out_path).and_then(|out| {
            let err = File::create(&err_path)?;
            let mut cmd = Command::new(bin);
            cmd.args(&launch.args)
                .envs(launch.env.iter().map(|(k, v)| (k, v)))
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err);
            launcher::spawn(cmd)
        });
        match spawned {
            Ok(child) => running.push((i, child, out_path, err_path)),
            Err(e) => {
                ended[i] = Some(Ended {
                    name: launch.name.clone(),
                    pid: 0,
                    status: None,
                    timed_out: false,
                    stdout: String::new(),
                    stderr: format!("could not start {}: {e}", bin.display()),
                    elapsed: Duration::ZERO,
                    left_behind: false,
                })
            }
        }
    }
    let mut first_failure: Option<Instant> = None;
    while !running.is_empty() {
        let mut still = Vec::new();
        for (i, mut child, out, err) in running {
            match child.try_wait() {
                Ok(Some(status)) => {
                    if !status.success() && first_failure.is_none() {
                        first_failure = Some(Instant::now());
                    }
                    let mut e =
                        finished(&launches[i].name, child.id(), Some(status), false, &out, &err, start);
                    e.left_behind = child.left_behind();
                    ended[i] = Some(e);
                }
                _ => still.push((i, child, out, err)),
            }
        }
        running = still;
        let over_limit = start.elapsed() > limit;
        let over_grace = first_failure.is_some_and(|t| t.elapsed() > grace);
        if over_limit || over_grace {
            for (i, mut child, out, err) in running.drain(..) {
                let status = child.kill().ok();
                ended[i] = Some(finished(&launches[i].name, child.id(), status, true, &out, &err, start));
            }
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    ended.into_iter().map(|e| e.expect("every launch ended")).collect()
}

fn finished(
    name: &str,
    pid: u32,
    status: Option<ExitStatus>,
    timed_out: bool,
    out: &Path,
    err: &Path,
    start: Instant,
) -> Ended {
    Ended {
        name: name.to_string(),
        pid,
        status,
        timed_out,
        stdout: std::fs::read_to_string(out).unwrap_or_default(),
        stderr: std::fs::read_to_string(err).unwrap_or_default(),
        elapsed: start.elapsed(),
        left_behind: false,
    }
}
