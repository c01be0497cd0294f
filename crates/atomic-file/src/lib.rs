//! Writing a file so that whoever reads it sees the old content or the new, never half
//! of it: the new content goes to a temporary file beside the target (tempfile), which
//! then replaces it with one rename. A failure leaves the old file and no temporary one.
//! The workspace's one way to write reports, progress, generated crates and restored
//! starters.
use std::io::Write;
use std::path::Path;

/// Writes `path` through a temporary file beside it and a rename (tempfile's
/// `persist`), so readers never see half a file and a failure leaves the old one.
pub fn write_atomically(path: &Path, contents: impl AsRef<[u8]>) -> std::io::Result<()> {
    write_through_temp(path, |tmp| {
        let mut file = std::fs::File::create(tmp)?;
        file.write_all(contents.as_ref())?;
        file.sync_all()
    })
}

/// The same for a writer that wants a path (a chart library): `write` fills a
/// temporary file beside `path`, with the same extension (encoders pick the format
/// from it), which then replaces `path`.
pub fn write_through_temp(
    path: &Path,
    write: impl FnOnce(&Path) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let suffix = path.extension().map(|e| format!(".{}", e.to_string_lossy())).unwrap_or_default();
    let tmp = tempfile::Builder::new().prefix(".").suffix(&suffix).tempfile_in(dir)?;
    write(tmp.path())?;
    tmp.persist(path).map(|_| ()).map_err(|e| e.error)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
