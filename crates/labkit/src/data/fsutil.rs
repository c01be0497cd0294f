//! Small file-system helpers: labkit's atomic writes (through the workspace's
//! `atomic-file`) and the per-directory lock.
//!
//! The lab's ranks read the data right after a barrier, possibly while another
//! process on the host is still writing it. So a data file is only ever visible
//! under its final name when it is complete: it is written under a hidden temporary
//! name in the same directory (same file system, so the rename is atomic), flushed
//! to disk, and renamed.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

use super::DataError;

/// Name of the lock file taken by [`DirLock`].
pub const LOCK_FILE: &str = ".labkit-data.lock";

/// How labkit writes files atomically: temporary names `.labkit-<name>.<random>.tmp`,
/// which [`remove_stale_temp_files`] recognises as leftovers of a killed process; the
/// directory flushed after the rename, so a crash leaves the old file or the new, whole;
/// and the mode a plain `File::create` gives (readable by the node's other users, as a
/// file written in place is), not tempfile's owner-only default.
pub(crate) fn writer() -> atomic_file::Writer {
    atomic_file::Writer::new().tagged("labkit").sync_dir().mode(0o666)
}

/// Writes `bytes` to `dir/name` atomically (see the module documentation).
pub(crate) fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<PathBuf, DataError> {
    let target = dir.join(name);
    writer().write(&target, bytes).map_err(|e| DataError::io("write", &target, e))?;
    Ok(target)
}

/// Removes temporary files that a killed process left behind in `dir`. Only called
/// while holding the directory lock (or by a directory's one writer), so no live
/// writer can own them.
pub(crate) fn remove_stale_temp_files(dir: &Path) {
    writer().remove_leftovers(dir);
}

/// Creates `dir` (and its parents) when missing.
pub(crate) fn create_dir(dir: &Path) -> Result<(), DataError> {
    fs::create_dir_all(dir).map_err(|e| DataError::io("create directory", dir, e))
}

/// An exclusive lock on a data directory, held until dropped.
///
/// Several processes of one host (the ranks of a node) may all call
/// [`ensure_dataset`](super::ensure_dataset); the lock makes the first one fetch or
/// generate the files while the others wait, and then find the files present. It is
/// an advisory `flock` on a file inside the directory: the kernel drops it when the
/// process dies, so a crashed rank never leaves the directory locked. `flock` locks
/// belong to an open file, so two threads of one process also exclude each other.
pub struct DirLock {
    _file: Option<File>,
}

impl DirLock {
    /// Creates `dir` if needed and blocks until its lock is free.
    ///
    /// A directory on a read-only mount (the checker's sandbox shows the shared data
    /// that way) needs no lock: nobody can change it, and anything that would have
    /// to write there fails on its own, naming the file.
    pub fn acquire(dir: &Path) -> Result<DirLock, DataError> {
        create_dir(dir)?;
        let path = dir.join(LOCK_FILE);
        let opened = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path);
        let file = match opened {
            Ok(file) => file,
            Err(e) if e.raw_os_error() == Some(libc::EROFS) => return Ok(DirLock { _file: None }),
            Err(e) => return Err(DataError::io("open lock file", &path, e)),
        };
        lock_exclusive(&file).map_err(|e| DataError::io("lock", &path, e))?;
        Ok(DirLock { _file: Some(file) })
    }
}

#[cfg(unix)]
fn lock_exclusive(file: &File) -> io::Result<()> {
    use std::os::unix::io::AsRawFd;
    loop {
        // SAFETY: flock only reads the descriptor, which `file` keeps open.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

#[cfg(not(unix))]
fn lock_exclusive(_file: &File) -> io::Result<()> {
    // The lab runs on Linux; elsewhere concurrent preparation is simply not guarded.
    Ok(())
}
