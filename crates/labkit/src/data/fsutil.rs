//! Small file-system helpers: temporary files that clean up after themselves, atomic
//! publication by rename, and the per-directory lock.
//!
//! The lab's ranks read the data right after a barrier, possibly while another
//! process on the host is still writing it. So a data file is only ever visible
//! under its final name when it is complete: it is written under a hidden temporary
//! name in the same directory (same file system, so the rename is atomic), flushed
//! to disk, and renamed.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::DataError;

/// Prefix and suffix of every temporary file this module creates, so that leftovers
/// of a killed process can be recognised and removed.
const TEMP_PREFIX: &str = ".labkit-";
const TEMP_SUFFIX: &str = ".tmp";
/// Name of the lock file taken by [`DirLock`].
pub const LOCK_FILE: &str = ".labkit-data.lock";

/// A file under a temporary name that is deleted when dropped, unless
/// [`persist`](TempFile::persist) renamed it to its final name first.
pub(crate) struct TempFile {
    path: PathBuf,
    file: Option<File>,
}

impl TempFile {
    /// Creates `dir/.labkit-<name>.<pid>-<n>.tmp`, unique within and across processes.
    pub(crate) fn create(dir: &Path, name: &str) -> Result<TempFile, DataError> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!("{TEMP_PREFIX}{name}.{}-{n}{TEMP_SUFFIX}", std::process::id()));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| DataError::io("create", &path, e))?;
        Ok(TempFile { path, file: Some(file) })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn file(&mut self) -> &mut File {
        self.file.as_mut().expect("temporary file is open until persisted")
    }

    /// Flushes the contents to disk, renames the file to `dir/name`, and flushes the
    /// directory entry, so that after a crash the final name holds either nothing or
    /// the complete file.
    pub(crate) fn persist(mut self, dir: &Path, name: &str) -> Result<PathBuf, DataError> {
        let file = self.file.take().expect("temporary file is open until persisted");
        file.sync_all().map_err(|e| DataError::io("flush", &self.path, e))?;
        drop(file);
        let target = dir.join(name);
        fs::rename(&self.path, &target).map_err(|e| DataError::io("rename into place", &target, e))?;
        // Renamed: nothing is left to clean up under the temporary name.
        self.path = PathBuf::new();
        sync_dir(dir);
        Ok(target)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        self.file.take();
        if !self.path.as_os_str().is_empty() {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Writes `bytes` to `dir/name` atomically (see the module documentation).
pub(crate) fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<PathBuf, DataError> {
    let mut tmp = TempFile::create(dir, name)?;
    let path = tmp.path().to_path_buf();
    tmp.file().write_all(bytes).map_err(|e| DataError::io("write", &path, e))?;
    tmp.persist(dir, name)
}

/// Flushes a directory so a rename inside it survives a crash. Best effort: some
/// file systems refuse to open directories, and the rename itself already happened.
fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Removes temporary files that a killed process left behind in `dir`. Only called
/// while holding the directory lock, so no live writer can own them.
pub(crate) fn remove_stale_temp_files(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(TEMP_PREFIX) && name.ends_with(TEMP_SUFFIX) {
            let _ = fs::remove_file(entry.path());
        }
    }
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
    _file: File,
}

impl DirLock {
    /// Creates `dir` if needed and blocks until its lock is free.
    pub fn acquire(dir: &Path) -> Result<DirLock, DataError> {
        create_dir(dir)?;
        let path = dir.join(LOCK_FILE);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| DataError::io("open lock file", &path, e))?;
        lock_exclusive(&file).map_err(|e| DataError::io("lock", &path, e))?;
        Ok(DirLock { _file: file })
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
