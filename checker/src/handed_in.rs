//! Finding the program in what a student handed in: a crate folder (`src/main.rs`),
//! a bare `main.rs`, a crate folder one level down (`step_07/src/main.rs`), a clone of
//! the whole lab (`steps/step_07/src/main.rs`), or a `.zip` of any of these. `--crate`
//! takes each, as Gradescope's submission folder may hold each.
//!
//! Only the one `main.rs` is read, never written anywhere by its own name: symlinks are
//! not followed (a link to a grader's file would show it in compiler errors), hidden
//! folders, `target/` and macOS's `__MACOSX/` are skipped, and the file must be UTF-8
//! text of at most [`MAX_SOURCE_BYTES`].
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// A step's program is a few hundred lines; a larger "main.rs" is not one.
pub const MAX_SOURCE_BYTES: u64 = 1 << 20;

/// The program found.
#[derive(Debug)]
pub struct HandedIn {
    pub source: String,
    /// Where it was found, for reports: `step_07/src/main.rs`, `work.zip: src/main.rs`.
    pub found: String,
}

/// Why nothing can be graded.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The path names nothing: the grader's mistake (a usage error).
    Missing(String),
    /// What was handed in holds no single program to grade: the submission's problem,
    /// which its report says.
    Unusable(String),
}

impl Refusal {
    pub fn message(&self) -> &str {
        match self {
            Refusal::Missing(m) | Refusal::Unusable(m) => m,
        }
    }
}

/// Where a candidate `main.rs` lives.
#[derive(Debug, Clone)]
enum Origin {
    File(PathBuf),
    /// An entry of a zip archive, by index.
    Zipped(PathBuf, usize),
}

#[derive(Debug, Clone)]
struct Candidate {
    /// Path relative to what was handed in (inside a zip: relative to its root).
    shown: String,
    rank: Rank,
    origin: Origin,
}

/// Which layouts win when several are present: the crate folder itself, then the
/// graded step's crate in a clone of the lab, then any other single `main.rs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Rank {
    CrateFolder,
    LabClone,
    Elsewhere,
}

/// What the layouts accept, for messages.
fn accepted(step: u8) -> String {
    let lab_clone = lab_course::Version::Starter(step).crate_dir().join("src/main.rs");
    format!(
        "src/main.rs, main.rs, <folder>/src/main.rs, <folder>/main.rs or {}, \
         or a .zip holding one of these",
        lab_clone.display()
    )
}

/// The program in `given` for step `step`.
pub fn find(given: &Path, step: u8) -> Result<HandedIn, Refusal> {
    let meta = std::fs::symlink_metadata(given).map_err(|e| {
        Refusal::Missing(format!(
            "--crate {}: {}; name what was handed in: a crate folder (holding src/main.rs), its main.rs, or a .zip of it",
            given.display(),
            if e.kind() == std::io::ErrorKind::NotFound { "no such file or directory".into() } else { e.to_string() }
        ))
    })?;
    let mut candidates = Vec::new();
    if meta.is_dir() {
        from_folder(given, step, &mut candidates)?;
    } else if meta.is_file() && has_extension(given, "zip") {
        from_zip(given, "", step, &mut candidates)?;
    } else if meta.is_file() && has_extension(given, "rs") {
        let name = given.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        candidates.push(Candidate {
            shown: name,
            rank: Rank::CrateFolder,
            origin: Origin::File(given.into()),
        });
    } else {
        return Err(Refusal::Unusable(format!(
            "{}: not a folder, a .rs file or a .zip; hand in the step's {}",
            given.display(),
            accepted(step)
        )));
    }
    let Some(best) = candidates.iter().map(|c| c.rank).min() else {
        return Err(Refusal::Unusable(format!(
            "{}: no main.rs in it; looked for {}. It holds: {}",
            given.display(),
            accepted(step),
            listing(given)
        )));
    };
    let chosen: Vec<&Candidate> = candidates.iter().filter(|c| c.rank == best).collect();
    if let [one] = chosen[..] {
        let source = read(one)?;
        return Ok(HandedIn { source, found: one.shown.clone() });
    }
    let names: Vec<&str> = chosen.iter().map(|c| c.shown.as_str()).collect();
    Err(Refusal::Unusable(format!(
        "{}: several programs in it ({}); hand in one step's main.rs or one crate folder",
        given.display(),
        names.join(", ")
    )))
}

fn has_extension(path: &Path, ext: &str) -> bool {
    path.extension().is_some_and(|e| e.eq_ignore_ascii_case(ext))
}

/// Hidden files and folders, build output and macOS's resource forks are not handed-in code.
fn skipped(name: &str) -> bool {
    name.starts_with('.') || name == "target" || name == "__MACOSX"
}

/// Where a relative path stands among the accepted layouts, if it is one.
fn rank_of(parts: &[&str], step: u8) -> Option<Rank> {
    if parts.iter().any(|p| skipped(p)) {
        return None;
    }
    let step_dir = lab_course::Version::Starter(step).crate_dir();
    match parts {
        ["src", "main.rs"] => Some(Rank::CrateFolder),
        [top, dir, "src", "main.rs"] if Path::new(top).join(dir) == step_dir => Some(Rank::LabClone),
        ["main.rs"] | [_, "src", "main.rs"] | [_, "main.rs"] => Some(Rank::Elsewhere),
        _ => None,
    }
}

/// The candidates in a folder, its zips included; symlinks are never followed.
fn from_folder(root: &Path, step: u8, out: &mut Vec<Candidate>) -> Result<(), Refusal> {
    let relative = [
        vec!["src".to_string(), "main.rs".into()],
        lab_course::Version::Starter(step)
            .crate_dir()
            .join("src/main.rs")
            .iter()
            .map(|part| part.to_string_lossy().into_owned())
            .collect(),
        vec!["main.rs".into()],
    ];
    let mut paths: Vec<Vec<String>> = relative.to_vec();
    for sub in entries(root).into_iter().filter(|(_, is_dir)| *is_dir) {
        paths.push(vec![sub.0.clone(), "src".into(), "main.rs".into()]);
        paths.push(vec![sub.0, "main.rs".into()]);
    }
    for parts in paths {
        let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
        let Some(rank) = rank_of(&refs, step) else { continue };
        let path = parts.iter().fold(root.to_path_buf(), |p, part| p.join(part));
        // `src/main.rs` is also `<folder>/main.rs`: one candidate.
        if is_plain_file(root, &parts) && !out.iter().any(|c: &Candidate| c.shown == parts.join("/")) {
            out.push(Candidate { shown: parts.join("/"), rank, origin: Origin::File(path) });
        }
    }
    for (name, is_dir) in entries(root) {
        if !is_dir && has_extension(Path::new(&name), "zip") {
            from_zip(&root.join(&name), &format!("{name}: "), step, out)?;
        }
    }
    Ok(())
}

/// The folder's entries (name, is a real folder), sorted, hidden ones left out.
fn entries(dir: &Path) -> Vec<(String, bool)> {
    let mut found: Vec<(String, bool)> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let kind = e.file_type().ok()?;
                    (!skipped(&name)).then_some((name, kind.is_dir()))
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

/// `root/parts...` is a regular file reached through real folders (no symlink anywhere).
fn is_plain_file(root: &Path, parts: &[String]) -> bool {
    let mut path = root.to_path_buf();
    for (i, part) in parts.iter().enumerate() {
        path.push(part);
        match std::fs::symlink_metadata(&path) {
            Ok(m) if i + 1 == parts.len() => return m.file_type().is_file(),
            Ok(m) if m.file_type().is_dir() => {}
            _ => return false,
        }
    }
    false
}

/// The candidates inside a zip archive (its entries' names only; nothing is extracted).
fn from_zip(path: &Path, prefix: &str, step: u8, out: &mut Vec<Candidate>) -> Result<(), Refusal> {
    let unreadable = |e: &dyn std::fmt::Display| {
        Refusal::Unusable(format!(
            "{}: not a readable zip archive ({e}); hand in a .zip made by a zip tool",
            path.display()
        ))
    };
    let file = File::open(path).map_err(|e| unreadable(&e))?;
    let mut archive = zip::ZipArchive::new(file).map_err(|e| unreadable(&e))?;
    for index in 0..archive.len() {
        let entry = archive.by_index_raw(index).map_err(|e| unreadable(&e))?;
        if entry.is_dir() || entry.unix_mode().is_some_and(|m| m & 0o170000 == 0o120000) {
            continue; // folders, and symlinks stored as links
        }
        // Names that would climb out of the archive (`../`, absolute) are not code.
        let Some(name) = entry.enclosed_name().map(|n| n.to_string_lossy().replace('\\', "/")) else {
            continue;
        };
        let parts: Vec<&str> = name.split('/').filter(|p| !p.is_empty()).collect();
        if let Some(rank) = rank_of(&parts, step) {
            out.push(Candidate {
                shown: format!("{prefix}{}", parts.join("/")),
                rank,
                origin: Origin::Zipped(path.to_path_buf(), index),
            });
        }
    }
    Ok(())
}

fn read(candidate: &Candidate) -> Result<String, Refusal> {
    let too_big = || {
        Refusal::Unusable(format!(
            "{}: over {} KiB, too large for a step's program; hand in the step's main.rs",
            candidate.shown,
            MAX_SOURCE_BYTES >> 10
        ))
    };
    let unreadable =
        |e: &dyn std::fmt::Display| Refusal::Unusable(format!("cannot read {}: {e}", candidate.shown));
    let mut bytes = Vec::new();
    match &candidate.origin {
        Origin::File(path) => {
            let file = File::open(path).map_err(|e| unreadable(&e))?;
            file.take(MAX_SOURCE_BYTES + 1).read_to_end(&mut bytes).map_err(|e| unreadable(&e))?;
        }
        Origin::Zipped(path, index) => {
            let file = File::open(path).map_err(|e| unreadable(&e))?;
            let mut archive = zip::ZipArchive::new(file).map_err(|e| unreadable(&e))?;
            let entry = archive.by_index(*index).map_err(|e| unreadable(&e))?;
            // Read no more than the limit, whatever size the archive claims.
            entry.take(MAX_SOURCE_BYTES + 1).read_to_end(&mut bytes).map_err(|e| unreadable(&e))?;
        }
    }
    if bytes.len() as u64 > MAX_SOURCE_BYTES {
        return Err(too_big());
    }
    String::from_utf8(bytes).map_err(|_| {
        Refusal::Unusable(format!("{}: not UTF-8 text; hand in the Rust source file itself", candidate.shown))
    })
}

/// A few of the names in a folder, for a message.
fn listing(path: &Path) -> String {
    if !path.is_dir() {
        return path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    }
    let names: Vec<String> = entries(path)
        .into_iter()
        .map(|(name, is_dir)| if is_dir { format!("{name}/") } else { name })
        .collect();
    match names.len() {
        0 => "nothing".into(),
        n if n > 8 => format!("{}, and {} more", names[..8].join(", "), n - 8),
        _ => names.join(", "),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn write(root: &Path, rel: &str, text: &str) {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn zip_of(path: &Path, files: &[(&str, &str)]) {
        let mut zip = zip::ZipWriter::new(File::create(path).unwrap());
        for (name, text) in files {
            zip.start_file(*name, zip::write::FileOptions::default()).unwrap();
            zip.write_all(text.as_bytes()).unwrap();
        }
        zip.finish().unwrap();
    }

    fn found(given: &Path) -> (String, String) {
        let h = find(given, 7).unwrap();
        (h.found, h.source)
    }

    #[test]
    fn every_layout_students_hand_in() {
        let t = tempfile::tempdir().unwrap();
        let at = |name: &str| t.path().join(name);
        write(&at("crate"), "src/main.rs", "crate");
        write(&at("crate"), "Cargo.toml", "[package]");
        assert_eq!(found(&at("crate")), ("src/main.rs".into(), "crate".into()));
        write(&at("bare"), "main.rs", "bare");
        assert_eq!(found(&at("bare")), ("main.rs".into(), "bare".into()));
        assert_eq!(found(&at("bare/main.rs")), ("main.rs".into(), "bare".into()));
        write(&at("nested"), "step_07/src/main.rs", "nested");
        write(&at("nested"), "__MACOSX/step_07/src/main.rs", "resource fork");
        write(&at("nested"), "step_07/target/debug/main.rs", "build output");
        assert_eq!(found(&at("nested")), ("step_07/src/main.rs".into(), "nested".into()));
        write(&at("folder"), "work/main.rs", "folder");
        assert_eq!(found(&at("folder")), ("work/main.rs".into(), "folder".into()));
        // A clone of the lab: the graded step's crate, among many main.rs.
        write(&at("clone"), "steps/step_07/src/main.rs", "step 7");
        write(&at("clone"), "steps/step_06/src/main.rs", "step 6");
        write(&at("clone"), "checker/src/main.rs", "checker");
        assert_eq!(found(&at("clone")), ("steps/step_07/src/main.rs".into(), "step 7".into()));
    }

    #[test]
    fn zips_are_read_in_place() {
        let t = tempfile::tempdir().unwrap();
        let zip = t.path().join("work.zip");
        zip_of(&zip, &[("step_07/src/main.rs", "zipped"), ("step_07/Cargo.toml", "[package]")]);
        assert_eq!(found(&zip), ("step_07/src/main.rs".into(), "zipped".into()));
        // A folder holding the zip, as Gradescope's submission folder may.
        let folder = t.path().join("submission");
        std::fs::create_dir(&folder).unwrap();
        std::fs::copy(&zip, folder.join("work.zip")).unwrap();
        assert_eq!(found(&folder), ("work.zip: step_07/src/main.rs".into(), "zipped".into()));
        // Names that climb out of the archive are not candidates.
        let climbing = t.path().join("climbing.zip");
        zip_of(&climbing, &[("../main.rs", "outside")]);
        assert!(matches!(find(&climbing, 7), Err(Refusal::Unusable(m)) if m.contains("no main.rs")));
        let broken = t.path().join("broken.zip");
        std::fs::write(&broken, "not a zip").unwrap();
        assert!(
            matches!(find(&broken, 7), Err(Refusal::Unusable(m)) if m.contains("not a readable zip archive"))
        );
    }

    #[test]
    fn what_cannot_be_graded_says_why() {
        let t = tempfile::tempdir().unwrap();
        let missing = t.path().join("nope");
        let Err(Refusal::Missing(m)) = find(&missing, 7) else {
            panic!("a missing path is the grader's mistake")
        };
        assert!(m.contains("no such file or directory"), "{m}");
        write(t.path(), "empty/notes.txt", "hi");
        let Err(Refusal::Unusable(m)) = find(&t.path().join("empty"), 7) else { panic!() };
        assert!(m.contains("no main.rs in it") && m.contains("It holds: notes.txt"), "{m}");
        assert!(m.contains("steps/step_07/src/main.rs"), "{m}");
        write(t.path(), "two/a/main.rs", "a");
        write(t.path(), "two/b/src/main.rs", "b");
        let Err(Refusal::Unusable(m)) = find(&t.path().join("two"), 7) else { panic!() };
        assert!(m.contains("several programs in it (a/main.rs, b/src/main.rs)"), "{m}");
        write(t.path(), "big/src/main.rs", &"x".repeat(MAX_SOURCE_BYTES as usize + 1));
        let Err(Refusal::Unusable(m)) = find(&t.path().join("big"), 7) else { panic!() };
        assert!(m.contains("too large"), "{m}");
    }

    #[test]
    fn symlinks_are_not_followed() {
        let t = tempfile::tempdir().unwrap();
        write(t.path(), "secret", "the grader's secret");
        std::fs::create_dir_all(t.path().join("linked/src")).unwrap();
        std::os::unix::fs::symlink(t.path().join("secret"), t.path().join("linked/src/main.rs")).unwrap();
        assert!(matches!(find(&t.path().join("linked"), 7), Err(Refusal::Unusable(_))));
        std::fs::create_dir_all(t.path().join("real/src")).unwrap();
        write(t.path(), "real/src/main.rs", "fn main() {}");
        std::fs::create_dir(t.path().join("via")).unwrap();
        std::os::unix::fs::symlink(t.path().join("real"), t.path().join("via/step_07")).unwrap();
        assert!(matches!(find(&t.path().join("via"), 7), Err(Refusal::Unusable(_))));
    }
}
