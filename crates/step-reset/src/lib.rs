//! Restoring a step crate to its starter, for a student who wants to start the step over.
//!
//! The starter is rendered from `course/lab` (as coursegen makes it) rather than taken
//! from git, so a reset works in a tree without history and always matches the course.
//! Nothing is lost: the crate as it was is copied to `.checker/backups/` first.
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use lab_course::{CourseError, Version};

/// Everything that can go wrong resetting a step. Each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum ResetError {
    /// Not one of the lab's steps (coursegen knows which there are).
    #[error(transparent)]
    NoSuchStep(CourseError),
    #[error(
        "cannot work out the starter of step {step}: {source}; check that course/lab is intact \
         (`git status course/lab`)"
    )]
    Course { step: u8, source: CourseError },
    #[error("cannot {action} {}: {source}; check the permissions and free space there", path.display())]
    Io { action: &'static str, path: PathBuf, source: io::Error },
}

impl ResetError {
    /// Returns a closure that wraps an I/O error with what was being done and where.
    fn io(action: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> ResetError {
        let path = path.into();
        move |source| ResetError::Io { action, path, source }
    }
}

/// Where the backups go, relative to the repository root.
pub const BACKUP_DIR: &str = ".checker/backups";

/// What [`reset`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResetOutcome {
    /// Every generated file already equals the starter; nothing was asked or changed.
    AlreadyPristine,
    /// The student answered no; nothing was changed.
    Declined,
    /// The crate was backed up to `backup` (under `repo_root`), then `files` (relative to the
    /// repository root: those that differed) were rewritten from the starter.
    Reset { backup: PathBuf, files: Vec<PathBuf> },
}

/// Restores `steps/step_NN` to the starter of `step`, after `confirm` agrees to a
/// question naming the files that differ. Only the generated files (manifest, build
/// script, main.rs) are rewritten; other files the student added stay, and are backed up too.
pub fn reset(
    repo_root: &Path,
    step: u8,
    confirm: &mut dyn FnMut(&str) -> bool,
) -> Result<ResetOutcome, ResetError> {
    let version = Version::Starter(step).validate().map_err(ResetError::NoSuchStep)?;
    let starter =
        lab_course::crate_files(repo_root, version).map_err(|source| ResetError::Course { step, source })?;
    let mut differing = Vec::new();
    for (rel, content) in starter {
        let path = repo_root.join(&rel);
        match fs::read(&path) {
            Ok(found) if found == content.as_bytes() => {}
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                return Err(ResetError::Io { action: "read", path, source: e })
            }
            _ => differing.push((rel, content)),
        }
    }
    if differing.is_empty() {
        return Ok(ResetOutcome::AlreadyPristine);
    }

    let crate_dir = version.crate_dir();
    let names: Vec<String> = differing
        .iter()
        .map(|(rel, _)| rel.strip_prefix(&crate_dir).unwrap_or(rel).display().to_string())
        .collect();
    let question = format!(
        "{} differs from the starter of step {step} in: {}. Reset these files to the starter? \
         (The crate as it is now is backed up to {BACKUP_DIR}/ first.)",
        crate_dir.display(),
        names.join(", ")
    );
    if !confirm(&question) {
        return Ok(ResetOutcome::Declined);
    }

    // Named as the crate's folder, `step_07`.
    let name = crate_dir.file_name().expect("a crate folder").to_string_lossy();
    let backup = claim_backup_dir(&repo_root.join(BACKUP_DIR), &name, unix_seconds())?;
    let source = repo_root.join(&crate_dir);
    if source.exists() {
        copy_tree(&source, &backup, true)?;
    }
    let mut files = Vec::new();
    for (rel, content) in differing {
        write_atomically(&repo_root.join(&rel), content.as_bytes())?;
        files.push(rel);
    }
    Ok(ResetOutcome::Reset { backup, files })
}

fn unix_seconds() -> u64 {
    // A clock before 1970 only makes the name less telling; uniqueness comes from `-k`.
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Creates and returns a fresh `<parent>/<base>-<seconds>` directory, or `...-<seconds>-k`
/// with the first free k. `create_dir` fails on an existing directory, so claiming a
/// name is atomic and an earlier backup is never overwritten, even by a concurrent reset.
fn claim_backup_dir(parent: &Path, base: &str, seconds: u64) -> Result<PathBuf, ResetError> {
    fs::create_dir_all(parent).map_err(ResetError::io("create the backup directory", parent))?;
    for k in 0u32.. {
        let name = if k == 0 { format!("{base}-{seconds}") } else { format!("{base}-{seconds}-{k}") };
        let dir = parent.join(name);
        match fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(ResetError::Io { action: "create the backup directory", path: dir, source: e })
            }
        }
    }
    unreachable!("some suffix is free")
}

/// Copies the contents of `from` into the existing directory `to`; at the top level,
/// `target/` is skipped (build output: large, and rebuilt anyway).
fn copy_tree(from: &Path, to: &Path, top: bool) -> Result<(), ResetError> {
    let entries = fs::read_dir(from).map_err(ResetError::io("list", from))?;
    for entry in entries {
        let entry = entry.map_err(ResetError::io("list", from))?;
        let src = entry.path();
        let dst = to.join(entry.file_name());
        let kind = entry.file_type().map_err(ResetError::io("inspect", &src))?;
        if kind.is_dir() {
            if top && entry.file_name() == "target" {
                continue;
            }
            fs::create_dir(&dst).map_err(ResetError::io("create", &dst))?;
            copy_tree(&src, &dst, false)?;
        } else if kind.is_symlink() {
            copy_symlink(&src, &dst)?;
        } else {
            fs::copy(&src, &dst).map_err(ResetError::io("back up", &src))?;
        }
    }
    Ok(())
}

/// A link is copied as a link: following it could copy a whole tree, or loop.
#[cfg(unix)]
fn copy_symlink(src: &Path, dst: &Path) -> Result<(), ResetError> {
    let target = fs::read_link(src).map_err(ResetError::io("read the link", src))?;
    std::os::unix::fs::symlink(target, dst).map_err(ResetError::io("create the link", dst))
}

#[cfg(not(unix))]
fn copy_symlink(src: &Path, dst: &Path) -> Result<(), ResetError> {
    fs::copy(src, dst).map(drop).map_err(ResetError::io("back up", src))
}

/// Writes `content` over `path` atomically, so an interrupted reset leaves each file
/// either as it was or fully restored.
fn write_atomically(path: &Path, content: &[u8]) -> Result<(), ResetError> {
    let dir = path.parent().expect("starter files lie in a crate directory");
    fs::create_dir_all(dir).map_err(ResetError::io("create", dir))?;
    atomic_file::write_atomically(path, content).map_err(ResetError::io("write", path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backup_names_never_collide() {
        let parent = std::env::temp_dir().join(format!("step-reset-claim-{}", std::process::id()));
        let _ = fs::remove_dir_all(&parent);
        let a = claim_backup_dir(&parent, "step_03", 42).unwrap();
        let b = claim_backup_dir(&parent, "step_03", 42).unwrap();
        let c = claim_backup_dir(&parent, "step_03", 42).unwrap();
        assert_eq!(a.file_name().unwrap(), "step_03-42");
        assert_eq!(b.file_name().unwrap(), "step_03-42-1");
        assert_eq!(c.file_name().unwrap(), "step_03-42-2");
        fs::remove_dir_all(&parent).unwrap();
    }
}
