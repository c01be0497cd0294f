//! The generated crates on disk: what they should hold, writing them, and finding
//! where they drifted from the master.
use std::collections::BTreeSet;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use crate::{format, read, render_main, render_manifest, CourseError, Version, BUILD_SCRIPT, MASTER};

/// The directories whose subdirectories are all generated crates.
const GENERATED_ROOTS: [&str; 2] = ["steps", "solutions"];

/// The files of one version's crate, as (path relative to `repo_root`, content):
/// `Cargo.toml`, `build.rs` and the formatted `src/main.rs` under [`Version::crate_dir`].
pub fn crate_files(repo_root: &Path, version: Version) -> Result<Vec<(PathBuf, String)>, CourseError> {
    let version = version.validate()?;
    // A students' copy has no master: its starters are the pristine copies it was given.
    if let (Version::Starter(_), false, Some(_)) =
        (version, repo_root.join(MASTER).exists(), crate::copy_mark::read_mark(repo_root))
    {
        return pristine_starter(repo_root, version);
    }
    let master = read(&repo_root.join(MASTER))?;
    let manifest = read(&repo_root.join(crate::MANIFEST_TEMPLATE))?;
    let build = read(&repo_root.join(BUILD_SCRIPT))?;
    for (i, line) in build.lines().enumerate() {
        crate::check_leftover(BUILD_SCRIPT, i + 1, line, version)?;
    }
    let main = format::rustfmt(&render_main(&master, version)?, repo_root, version)?;
    let dir = version.crate_dir();
    Ok(vec![
        (dir.join("Cargo.toml"), render_manifest(&manifest, version)?),
        (dir.join("build.rs"), build),
        (dir.join("src").join("main.rs"), main),
    ])
}

/// The starter of `version` as a students' copy keeps it under [`crate::copy_mark::STARTERS`].
fn pristine_starter(repo_root: &Path, version: Version) -> Result<Vec<(PathBuf, String)>, CourseError> {
    let dir = version.crate_dir();
    let kept = Path::new(crate::copy_mark::STARTERS).join(dir.strip_prefix("steps").expect("a starter"));
    ["Cargo.toml", "build.rs", "src/main.rs"]
        .into_iter()
        .map(|file| Ok((dir.join(file), read(&repo_root.join(&kept).join(file))?)))
        .collect()
}

/// Every file of all the step and solution crates, rendered before anything is written so that an error
/// in one version leaves the tree untouched.
fn all_files(repo_root: &Path) -> Result<Vec<(PathBuf, String)>, CourseError> {
    let mut files = Vec::new();
    for version in Version::all() {
        files.extend(crate_files(repo_root, version)?);
    }
    Ok(files)
}

/// Writes every generated file whose content changed and returns their paths
/// (relative to `repo_root`). Each goes to a temporary file beside it, then is renamed
/// over it, so an interrupted run never leaves a half-written file.
pub fn write_all(repo_root: &Path) -> Result<Vec<PathBuf>, CourseError> {
    let mut changed = Vec::new();
    for (rel, content) in all_files(repo_root)? {
        let path = repo_root.join(&rel);
        if fs::read(&path).is_ok_and(|old| old == content.as_bytes()) {
            continue;
        }
        let dir = path.parent().expect("generated files lie in a crate directory");
        fs::create_dir_all(dir).map_err(io_error(dir))?;
        atomic_file::write_atomically(&path, &content).map_err(io_error(&path))?;
        changed.push(rel);
    }
    Ok(changed)
}

/// Turns an I/O error into one that names `path`.
fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> CourseError + '_ {
    move |source| CourseError::Io { path: path.to_path_buf(), source }
}

/// A way the tree differs from what [`write_all`] would make it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Drift {
    /// A generated file that does not exist.
    Missing { path: PathBuf },
    /// A generated file with other content; `line` (from 1) is the first that differs,
    /// `expected`/`found` are that line quoted, or "end of file".
    Differs { path: PathBuf, line: usize, expected: String, found: String },
    /// A file in a generated crate that the generator does not produce.
    Unexpected { path: PathBuf },
}

impl fmt::Display for Drift {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Drift::Missing { path } => write!(f, "{}: missing", path.display()),
            Drift::Differs { path, line, expected, found } => write!(
                f,
                "{}:{line}: differs from the master\n    generated: {expected}\n    on disk:   {found}",
                path.display()
            ),
            Drift::Unexpected { path } => write!(
                f,
                "{}: not produced by coursegen; delete it, or generate it from course/lab",
                path.display()
            ),
        }
    }
}

/// Every generated file that is missing or differs, then every unexpected file in
/// `steps/*/` and `solutions/*/` (build output in `target/` aside), paths relative to
/// `repo_root`. Empty when the tree matches the master.
pub fn check_all(repo_root: &Path) -> Result<Vec<Drift>, CourseError> {
    let files = all_files(repo_root)?;
    let mut drift = Vec::new();
    for (rel, expected) in &files {
        match fs::read(repo_root.join(rel)) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                drift.push(Drift::Missing { path: rel.clone() })
            }
            Err(source) => return Err(CourseError::Io { path: repo_root.join(rel), source }),
            Ok(found) if found == expected.as_bytes() => {}
            Ok(found) => {
                let (line, expected, found) = first_difference(expected, &String::from_utf8_lossy(&found));
                drift.push(Drift::Differs { path: rel.clone(), line, expected, found });
            }
        }
    }
    let wanted: BTreeSet<&PathBuf> = files.iter().map(|(rel, _)| rel).collect();
    let mut present = BTreeSet::new();
    for top in GENERATED_ROOTS {
        for entry in read_dir(&repo_root.join(top))? {
            if entry.is_dir() {
                list_files(&entry, &mut present)?;
            }
        }
    }
    for path in present {
        let rel = path.strip_prefix(repo_root).expect("listed under the root").to_path_buf();
        if !wanted.contains(&rel) {
            drift.push(Drift::Unexpected { path: rel });
        }
    }
    Ok(drift)
}

/// The entries of `dir`, sorted; none if it does not exist.
fn read_dir(dir: &Path) -> Result<Vec<PathBuf>, CourseError> {
    let io = |source| CourseError::Io { path: dir.to_path_buf(), source };
    let entries = match fs::read_dir(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        entries => entries.map_err(io)?,
    };
    let mut paths = entries.map(|e| e.map(|e| e.path())).collect::<Result<Vec<_>, _>>().map_err(io)?;
    paths.sort();
    Ok(paths)
}

/// Adds every file under `dir` to `out`, skipping `target/` build output.
fn list_files(dir: &Path, out: &mut BTreeSet<PathBuf>) -> Result<(), CourseError> {
    for path in read_dir(dir)? {
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "target") {
                list_files(&path, out)?;
            }
        } else {
            out.insert(path);
        }
    }
    Ok(())
}

/// The first line (from 1) where the texts differ, with both versions of it quoted so
/// that whitespace shows; a trailing newline counts as part of its line.
fn first_difference(expected: &str, found: &str) -> (usize, String, String) {
    let quote = |line: Option<&str>| line.map_or("end of file".to_string(), |l| format!("{l:?}"));
    let (mut e, mut f) = (expected.split_inclusive('\n'), found.split_inclusive('\n'));
    let mut no = 1;
    loop {
        match (e.next(), f.next()) {
            (None, None) => return (no, quote(None), quote(None)),
            (a, b) if a == b => no += 1,
            (a, b) => return (no, quote(a), quote(b)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::first_difference;

    #[test]
    fn first_difference_finds_the_line_and_quotes_it() {
        assert_eq!(first_difference("a\nb\n", "a\nc\n"), (2, "\"b\\n\"".into(), "\"c\\n\"".into()));
        assert_eq!(first_difference("a\n", "a\nb\n"), (2, "end of file".into(), "\"b\\n\"".into()));
        assert_eq!(first_difference("a\n", "a"), (1, "\"a\\n\"".into(), "\"a\"".into()));
    }
}
