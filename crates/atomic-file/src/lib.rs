//! Writing a file so that whoever reads it sees the old content or the new, never half
//! of it: the new content goes to a temporary file beside the target (tempfile), which
//! is flushed to disk and then replaces the target with one rename. A failure leaves the
//! old file and no temporary one. The workspace's one way to write reports, progress,
//! generated crates, restored starters, and labkit's data files and checkpoints.
//!
//! [`write_atomically`] and [`write_through_temp`] cover most uses; a [`Writer`] also
//! names its temporary files recognisably (so that a program can remove what a killed
//! process left behind), flushes the directory after the rename, sets the new file's
//! mode, and hands out the temporary file itself ([`Writer::create`]) for a writer
//! that streams into it.
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Writes `path` through a temporary file beside it and a rename (tempfile's
/// `persist`), so readers never see half a file and a failure leaves the old one.
pub fn write_atomically(path: &Path, contents: impl AsRef<[u8]>) -> io::Result<()> {
    Writer::new().write(path, contents)
}

/// The same for a writer that wants a path (a chart library): `write` fills a
/// temporary file beside `path`, with the same extension (encoders pick the format
/// from it), which then replaces `path`.
pub fn write_through_temp(path: &Path, write: impl FnOnce(&Path) -> io::Result<()>) -> io::Result<()> {
    Writer::new().write_through_temp(path, write)
}

/// How to write a file atomically. The default (`Writer::new()`) is what
/// [`write_atomically`] does: a temporary name `.<random>.<extension>`, mode 0600
/// (tempfile's), no flush of the directory.
#[derive(Debug, Clone, Default)]
pub struct Writer {
    tag: Option<String>,
    sync_dir: bool,
    mode: Option<u32>,
}

impl Writer {
    pub fn new() -> Writer {
        Writer::default()
    }

    /// Names temporary files `.<tag>-<file name>.<random>.tmp`, so that a process
    /// killed mid-write leaves a file [`remove_leftovers`](Writer::remove_leftovers)
    /// recognises. (The name no longer ends with the target's extension.)
    pub fn tagged(mut self, tag: &str) -> Writer {
        self.tag = Some(tag.to_string());
        self
    }

    /// Also flushes the directory after the rename, so that after a crash the target's
    /// name holds the old file or the complete new one. Best effort: some file systems
    /// refuse to open directories, and the rename itself has happened by then.
    pub fn sync_dir(mut self) -> Writer {
        self.sync_dir = true;
        self
    }

    /// The new file's permission bits before the umask (Unix), e.g. 0o666 for what a
    /// plain `File::create` gives. Default: tempfile's 0o600.
    pub fn mode(mut self, mode: u32) -> Writer {
        self.mode = Some(mode);
        self
    }

    /// Writes `contents` to `path` atomically.
    pub fn write(&self, path: &Path, contents: impl AsRef<[u8]>) -> io::Result<()> {
        let mut pending = self.create(path)?;
        pending.file().write_all(contents.as_ref())?;
        pending.commit()
    }

    /// `write` fills the temporary file, by its path, which then replaces `path`.
    pub fn write_through_temp(
        &self,
        path: &Path,
        write: impl FnOnce(&Path) -> io::Result<()>,
    ) -> io::Result<()> {
        let pending = self.create(path)?;
        write(pending.path())?;
        pending.commit()
    }

    /// The temporary file that will replace `path`: fill it through
    /// [`file`](Pending::file) or its [`path`](Pending::path), then
    /// [`commit`](Pending::commit). Dropped uncommitted (an error path), it is removed.
    pub fn create(&self, path: &Path) -> io::Result<Pending> {
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let (prefix, suffix) = match &self.tag {
            Some(tag) => (format!(".{tag}-{name}."), ".tmp".to_string()),
            None => (
                ".".to_string(),
                path.extension().map(|e| format!(".{}", e.to_string_lossy())).unwrap_or_default(),
            ),
        };
        let mut builder = tempfile::Builder::new();
        builder.prefix(&prefix).suffix(&suffix);
        #[cfg(unix)]
        if let Some(mode) = self.mode {
            use std::os::unix::fs::PermissionsExt;
            builder.permissions(std::fs::Permissions::from_mode(mode));
        }
        let tmp = builder.tempfile_in(dir)?;
        Ok(Pending { tmp, target: path.to_path_buf(), dir: dir.to_path_buf(), sync_dir: self.sync_dir })
    }

    /// Removes the temporary files of this writer's tag from `dir`: what processes
    /// killed mid-write left. Only when no live writer with the tag works in `dir`
    /// (under a lock, or from the directory's one writer). Untagged: nothing to find.
    pub fn remove_leftovers(&self, dir: &Path) {
        let Some(tag) = &self.tag else { return };
        let prefix = format!(".{tag}-");
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(&prefix) && name.ends_with(".tmp") {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

/// A temporary file beside its target, from [`Writer::create`].
#[derive(Debug)]
pub struct Pending {
    tmp: tempfile::NamedTempFile,
    target: PathBuf,
    dir: PathBuf,
    sync_dir: bool,
}

impl Pending {
    /// The temporary file's path (for writers that open it by name).
    pub fn path(&self) -> &Path {
        self.tmp.path()
    }

    /// The temporary file, open for writing.
    pub fn file(&mut self) -> &mut File {
        self.tmp.as_file_mut()
    }

    /// Flushes the contents to disk and renames the file over the target (and flushes
    /// the directory, when the writer says so).
    pub fn commit(self) -> io::Result<()> {
        self.tmp.as_file().sync_all()?;
        self.tmp.persist(&self.target).map_err(|e| e.error)?;
        if self.sync_dir {
            if let Ok(dir) = File::open(&self.dir) {
                let _ = dir.sync_all();
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn writes_atomically_and_keeps_the_old_file_on_failure() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("scaling.json");
        write_atomically(&path, b"one").unwrap();
        write_atomically(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "no temporary file left");
        assert!(write_atomically(&dir.path().join("missing/x.json"), b"x").is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
    }

    #[test]
    fn a_failing_writer_leaves_the_old_file_and_no_temporary_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("scaling.png");
        write_atomically(&path, b"old").unwrap();
        let mut seen = None;
        let result = write_through_temp(&path, |tmp| {
            seen = Some(tmp.to_path_buf());
            std::fs::write(tmp, b"half")?;
            Err(std::io::Error::other("the encoder failed"))
        });
        assert!(result.is_err());
        let seen = seen.unwrap();
        assert_eq!(seen.extension().unwrap(), "png", "encoders pick the format from the extension");
        assert_eq!(seen.parent(), path.parent(), "beside the target: the rename stays on one file system");
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn tagged_temporary_files_are_recognised_and_only_they_are_removed_as_leftovers() {
        let dir = tempfile::tempdir().unwrap();
        let writer = Writer::new().tagged("labkit").sync_dir();
        let target = dir.path().join("checkpoint.json");
        let mut pending = writer.create(&target).unwrap();
        pending.file().write_all(b"{}").unwrap();
        let name = pending.path().file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with(".labkit-checkpoint.json.") && name.ends_with(".tmp"), "{name}");
        assert!(!target.exists(), "nothing under the final name before the commit");
        // A process killed here leaves its temporary file (no destructor runs).
        let leftover = pending.path().to_path_buf();
        std::mem::forget(pending);
        assert!(leftover.exists());
        // Someone else's hidden files, and a lock file of the same tag, stay.
        for other in [".other-x.tmp", ".labkit-data.lock", "plain.tmp"] {
            std::fs::write(dir.path().join(other), b"").unwrap();
        }
        writer.remove_leftovers(dir.path());
        assert_eq!(names(dir.path()), [".labkit-data.lock", ".other-x.tmp", "plain.tmp"]);
        // An untagged writer cannot tell its temporary files, and removes nothing.
        Writer::new().remove_leftovers(dir.path());
        assert_eq!(names(dir.path()).len(), 3);
    }

    #[test]
    fn a_pending_file_commits_into_place_or_vanishes_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let writer = Writer::new().tagged("labkit").sync_dir();
        let target = dir.path().join("weights.safetensors");
        let pending = writer.create(&target).unwrap();
        // Written by path, as safetensors writers do.
        std::fs::write(pending.path(), b"weights").unwrap();
        pending.commit().unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"weights");
        let mut dropped = writer.create(&target).unwrap();
        dropped.file().write_all(b"half").unwrap();
        drop(dropped);
        assert_eq!(names(dir.path()), ["weights.safetensors"]);
        assert_eq!(std::fs::read(&target).unwrap(), b"weights");
    }

    #[cfg(unix)]
    #[test]
    fn the_mode_is_that_of_a_plain_create_when_asked() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let (private, plain) = (dir.path().join("private"), dir.path().join("plain"));
        Writer::new().write(&private, b"x").unwrap();
        Writer::new().mode(0o666).write(&plain, b"x").unwrap();
        std::fs::write(dir.path().join("reference"), b"x").unwrap();
        let mode =
            |name: &str| std::fs::metadata(dir.path().join(name)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode("private"), 0o600);
        assert_eq!(mode("plain"), mode("reference"), "0o666 less the umask, as File::create");
    }
}
