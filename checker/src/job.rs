//! One job's processes: what to start ([`Launch`]), running them side by side, and how
//! each ended ([`Ended`]). Every process is started through the `child-process` crate: it
//! leads its own process group, so that a timeout or a failure kills everything it
//! started (spawned ranks included), and it dies with the checker, however the checker
//! ends. The checker runs a job here itself, or its supervisor does inside a sandbox
//! ([`crate::confined`]); which one, `run_processes` chooses (in [`crate::observe`]).
use std::fs::File;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// One process to start (serde-derived: the sandbox's job spec carries it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Launch {
    pub name: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

/// How a process ended. Serialisable so that a recorded observation (the judges'
/// test fixtures) keeps it whole: the wait status as its raw number, the time in ms.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Ended {
    pub name: String,
    pub pid: u32,
    #[serde(with = "raw_wait_status")]
    pub status: Option<ExitStatus>,
    pub timed_out: bool,
    pub stdout: String,
    pub stderr: String,
    #[serde(with = "millis")]
    pub elapsed: Duration,
    /// Processes of its group were still alive when it ended (and were killed then).
    pub left_behind: bool,
    /// The sandbox's limits it ran into ("killed: out of memory …"), when confined.
    #[serde(default)]
    pub limits: Vec<String>,
}

impl Ended {
    /// A process that never ran, and why (said on its stderr, where reports look).
    pub fn not_started(name: impl Into<String>, why: impl Into<String>) -> Ended {
        Ended {
            name: name.into(),
            pid: 0,
            status: None,
            timed_out: false,
            stdout: String::new(),
            stderr: why.into(),
            elapsed: Duration::ZERO,
            left_behind: false,
            limits: vec![],
        }
    }

    pub fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    /// e.g. "exit code 1", "killed by signal 9 (SIGKILL)", "timed out (killed)", and
    /// the sandbox's limit it hit ("killed by signal 9 (SIGKILL); killed: out of memory …").
    pub fn describe(&self) -> String {
        let mut said = match (self.timed_out, self.status) {
            (true, _) => "timed out (killed)".to_string(),
            (false, Some(status)) => child_process::describe(status),
            (false, None) => "did not start".to_string(),
        };
        for limit in &self.limits {
            said.push_str("; ");
            said.push_str(limit);
        }
        said
    }
}

/// One job: every process of one run of a program (a launch per node), started
/// together and waited for together.
#[derive(Clone, Copy)]
pub struct Job<'a> {
    /// The program each launch runs.
    pub bin: &'a Path,
    pub launches: &'a [Launch],
    /// Their working directory, where their output lands.
    pub dir: &'a Path,
    /// Directories of `dir` whose files a sandboxed job carries in from an earlier job
    /// and out to a later one ([`crate::confined`]); without a sandbox all jobs share
    /// `dir` and nothing needs carrying.
    pub carry: &'a [&'a str],
    /// The longest the job may take.
    pub limit: Duration,
    /// After one process fails, how long the others get to end on their own (a
    /// distributed program should notice a dead peer) before they are killed too.
    pub grace: Duration,
}

/// A job's processes run with the checker's own rights (`run_processes` in [`crate::observe`]
/// without a sandbox; and inside the sandbox, by its supervisor).
pub fn run_plain(job: &Job<'_>) -> Vec<Ended> {
    run_processes(job, false)
}

/// [`run_plain`] inside a sandbox: each process is the kernel's first choice when the
/// job runs out of memory, before the supervisor that reports how they ended.
pub fn run_supervised(job: &Job<'_>) -> Vec<Ended> {
    run_processes(job, true)
}

fn run_processes(job: &Job<'_>, oom_first: bool) -> Vec<Ended> {
    let Job { bin, launches, dir, limit, grace, .. } = *job;
    let start = Instant::now();
    // The launches that started: their index, process and output files.
    let (mut started, mut children) = (Vec::new(), Vec::new());
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
            if oom_first {
                oom_kill_first(&mut cmd);
            }
            child_process::spawn(cmd)
        });
        match spawned {
            Ok(child) => {
                started.push((i, out_path, err_path));
                children.push(child);
            }
            Err(e) => {
                ended[i] =
                    Some(Ended::not_started(&launch.name, format!("could not start {}: {e}", bin.display())))
            }
        }
    }
    // A failed rank gives its peers `grace` to notice and say so before they are killed.
    let spawning = start.elapsed();
    let how = child_process::Watch {
        limit: Some(limit.saturating_sub(spawning)),
        after_failure: Some(grace),
        ..Default::default()
    };
    let watched = child_process::watch(&mut children, &how);
    for (k, (child, (i, out, err))) in children.iter_mut().zip(&started).enumerate() {
        let name = &launches[*i].name;
        ended[*i] = Some(match (watched.statuses[k], watched.ended_after[k]) {
            (Some(status), Some(after)) => {
                let mut e = finished(name, child.id(), Some(status), false, out, err, spawning + after);
                e.left_behind = child.left_behind();
                e
            }
            // Past the limit or the grace after a failure (or not waitable): killed.
            _ => {
                let status = child.kill().ok();
                finished(name, child.id(), status, true, out, err, start.elapsed())
            }
        });
    }
    ended.into_iter().map(|e| e.expect("every launch ended")).collect()
}

/// Raises the child's `oom_score_adj` to the most (which needs no privilege; its
/// children inherit it).
fn oom_kill_first(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec: open(2) and write(2) on a constant path, no allocation.
    unsafe {
        cmd.pre_exec(|| {
            let fd = libc::open(c"/proc/self/oom_score_adj".as_ptr(), libc::O_WRONLY);
            if fd >= 0 {
                libc::write(fd, b"1000".as_ptr().cast(), 4);
                libc::close(fd);
            }
            Ok(())
        });
    }
}

fn finished(
    name: &str,
    pid: u32,
    status: Option<ExitStatus>,
    timed_out: bool,
    out: &Path,
    err: &Path,
    elapsed: Duration,
) -> Ended {
    Ended {
        name: name.to_string(),
        pid,
        status,
        timed_out,
        stdout: std::fs::read_to_string(out).unwrap_or_default(),
        stderr: std::fs::read_to_string(err).unwrap_or_default(),
        elapsed,
        left_behind: false,
        limits: vec![],
    }
}

/// `Option<ExitStatus>` as the raw wait status (`null`: never started).
mod raw_wait_status {
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(status: &Option<ExitStatus>, s: S) -> Result<S::Ok, S::Error> {
        match status {
            Some(status) => s.serialize_some(&status.into_raw()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<ExitStatus>, D::Error> {
        Ok(Option::<i32>::deserialize(d)?.map(ExitStatus::from_raw))
    }
}

/// A `Duration` as whole milliseconds.
mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}
