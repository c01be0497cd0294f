//! A started child: waiting for it (with or without a limit), killing its group, and
//! how it ended ([`Output`]).
use std::io::{self, Read};
use std::process::{ChildStderr, ChildStdin, ChildStdout, ExitStatus};
use std::time::{Duration, Instant};

use crate::describe::describe;
use crate::groups::{forget_group, group_alive, kill_group};

/// How often waits with a limit look at the child.
pub(crate) const POLL: Duration = Duration::from_millis(20);

/// A process started by [`spawn`](crate::spawn). Dropping it kills its process group
/// and reaps it.
#[derive(Debug)]
pub struct Child {
    inner: std::process::Child,
    pub stdin: Option<ChildStdin>,
    pub stdout: Option<ChildStdout>,
    pub stderr: Option<ChildStderr>,
    status: Option<ExitStatus>,
    left_behind: bool,
}

impl Child {
    /// Wraps a child just started in its own process group.
    pub(crate) fn new(mut inner: std::process::Child) -> Child {
        Child {
            stdin: inner.stdin.take(),
            stdout: inner.stdout.take(),
            stderr: inner.stderr.take(),
            inner,
            status: None,
            left_behind: false,
        }
    }

    /// Its pid, which is also its process group's id.
    pub fn id(&self) -> u32 {
        self.inner.id()
    }

    /// Its exit status once it has ended (reaping it, and killing what it left in its
    /// group); `None` while it runs.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        if self.status.is_none() {
            if let Some(status) = self.inner.try_wait()? {
                self.ended(status);
            }
        }
        Ok(self.status)
    }

    /// Waits for it to end; see [`Child::try_wait`].
    pub fn wait(&mut self) -> io::Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        let status = self.inner.wait()?;
        self.ended(status);
        Ok(status)
    }

    /// Waits at most `limit`; `None` if it is still running then (it is not killed).
    pub fn wait_timeout(&mut self, limit: Duration) -> io::Result<Option<ExitStatus>> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.try_wait()? {
                return Ok(Some(status));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(POLL);
        }
    }

    /// SIGKILL to its whole process group, then reaps it.
    pub fn kill(&mut self) -> io::Result<ExitStatus> {
        if self.status.is_none() {
            kill_group(self.id());
        }
        self.wait()
    }

    /// Whether processes of its group were still alive when it ended (they were
    /// killed then).
    pub fn left_behind(&self) -> bool {
        self.left_behind
    }

    /// Reads its stdout and stderr (those set to [`Stdio::piped`](std::process::Stdio::piped)) to the end while
    /// waiting for it; after `timeout` its group is killed and the output says
    /// `timed_out`.
    pub fn wait_with_output(mut self, timeout: Option<Duration>) -> io::Result<Output> {
        let start = Instant::now();
        drop(self.stdin.take());
        let out = drain(self.stdout.take());
        let err = drain(self.stderr.take());
        let (status, timed_out) = match timeout {
            None => (self.wait()?, false),
            Some(limit) => match self.wait_timeout(limit)? {
                Some(status) => (status, false),
                None => (self.kill()?, true),
            },
        };
        let text = |t: std::thread::JoinHandle<Vec<u8>>| {
            String::from_utf8_lossy(&t.join().unwrap_or_default()).into_owned()
        };
        Ok(Output {
            status,
            timed_out,
            stdout: text(out),
            stderr: text(err),
            elapsed: start.elapsed(),
            left_behind: self.left_behind,
        })
    }

    fn ended(&mut self, status: ExitStatus) {
        // The leader is gone; anything it left in its group goes too.
        self.left_behind = group_alive(self.id());
        kill_group(self.id());
        forget_group(self.id());
        self.status = Some(status);
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut bytes);
        }
        bytes
    })
}

/// How a process run by [`output`](crate::output) or [`Child::wait_with_output`] ended.
#[derive(Debug, Clone)]
pub struct Output {
    pub status: ExitStatus,
    /// It ran past its time limit and was killed.
    pub timed_out: bool,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
    /// Processes of its group outlived it (and were killed).
    pub left_behind: bool,
}

impl Output {
    /// Exit code 0 within the time limit.
    pub fn success(&self) -> bool {
        !self.timed_out && self.status.success()
    }

    /// "exit code 1", "killed by signal 9 (SIGKILL)" or "timed out (killed)".
    pub fn describe(&self) -> String {
        if self.timed_out {
            "timed out (killed)".to_string()
        } else {
            describe(self.status)
        }
    }
}
