//! The process groups this process started: killing one, the registry of those that
//! may still have members, and the watchdog process that kills them all once this
//! process dies, however it dies.
use std::collections::BTreeSet;
use std::io::{self, Write};
use std::os::unix::process::CommandExt;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::{Mutex, MutexGuard};

/// SIGKILL to the process group `pgid`.
pub fn kill_group(pgid: u32) {
    // SAFETY: kill(2) with a negative pid signals a process group; no memory involved.
    unsafe { libc::kill(-(pgid as libc::pid_t), libc::SIGKILL) };
}

/// Whether any process of the group `pgid` still exists (zombies included).
pub fn group_alive(pgid: u32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::kill(-(pgid as libc::pid_t), 0) == 0 }
}

/// The process groups this process started that may still have members, and the
/// watchdog's pipe.
struct Groups {
    live: BTreeSet<u32>,
    watchdog: Option<ChildStdin>,
    watchdog_tried: bool,
}

static GROUPS: Mutex<Groups> =
    Mutex::new(Groups { live: BTreeSet::new(), watchdog: None, watchdog_tried: false });

fn groups() -> MutexGuard<'static, Groups> {
    // A panic elsewhere while holding the lock leaves the set itself consistent.
    GROUPS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Tells the watchdog that a group is done with, so that it never kills a later group
/// that happens to get the same id.
pub(crate) fn forget_group(pgid: u32) {
    let mut groups = groups();
    if groups.live.remove(&pgid) {
        tell_watchdog(&mut groups, &format!("- {pgid}"));
    }
}

fn tell_watchdog(groups: &mut Groups, line: &str) {
    if let Some(pipe) = groups.watchdog.as_mut() {
        if writeln!(pipe, "{line}").is_err() {
            groups.watchdog = None;
        }
    }
}

/// The watchdog: `+ PGID` and `- PGID` lines keep its list; end of input (this process
/// died, however) makes it kill every group still listed. It has a group of its own,
/// so a Ctrl-C typed in the terminal does not end it before it can act.
const WATCHDOG: &str = r#"trap '' INT HUP
groups=
while read -r op pgid; do
    case $op in
        +) groups="$groups $pgid" ;;
        -) kept=; for g in $groups; do [ "$g" = "$pgid" ] || kept="$kept $g"; done; groups=$kept ;;
    esac
done
for g in $groups; do kill -s KILL -- "-$g" 2>/dev/null; done
"#;

fn start_watchdog() -> Option<ChildStdin> {
    let mut cmd = Command::new("/bin/sh");
    cmd.args(["-c", WATCHDOG, "launcher-watchdog"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    // Without it the death signal still ends direct children; only grandchildren lose.
    cmd.spawn().ok()?.stdin.take()
}

/// Spawns `cmd` (already set to lead its own group) and lists its group, starting the
/// watchdog on first use.
pub(crate) fn spawn_registered(cmd: &mut Command) -> io::Result<std::process::Child> {
    // Registered under the same lock a stop signal takes: no child slips between.
    let mut groups = groups();
    if !groups.watchdog_tried {
        groups.watchdog_tried = true;
        groups.watchdog = start_watchdog();
    }
    let child = cmd.spawn()?;
    groups.live.insert(child.id());
    tell_watchdog(&mut groups, &format!("+ {}", child.id()));
    Ok(child)
}

/// Kills every listed group and ends this process with `code`, holding the lock so that
/// nothing new starts meanwhile.
pub(crate) fn kill_all_and_exit(code: i32) -> ! {
    let groups = groups();
    for &pgid in &groups.live {
        kill_group(pgid);
    }
    // _exit, not exit: libtorch's static destructors can race with its running threads.
    // SAFETY: _exit never returns.
    unsafe { libc::_exit(code) }
}
