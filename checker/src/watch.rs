//! `checker watch step N`: verify, then verify again each time a file of the step's
//! `src/` is saved. Polling, not inotify: it works the same on every file system
//! (network homes, containers' bind mounts), and twice a second is plenty for a person.
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often the files are looked at.
const POLL: Duration = Duration::from_millis(500);
/// How long the files must stay unchanged before a run starts: editors that save in
/// several writes (or save every buffer at once) trigger one run, not several.
const SETTLE: Duration = Duration::from_millis(400);

/// What the watched files hold now: every file under `dir`, by path, hashed by
/// content, so that a save that changes nothing (or a `touch`) starts no run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot(u64);

impl Snapshot {
    pub fn of(dir: &Path) -> Snapshot {
        let mut files = Vec::new();
        collect(dir, &mut files);
        files.sort();
        let mut h = DefaultHasher::new();
        for path in files {
            path.hash(&mut h);
            // A file that vanishes between listing and reading (an editor's rename)
            // hashes as empty; the next poll sees its replacement.
            std::fs::read(&path).unwrap_or_default().hash(&mut h);
        }
        Snapshot(h.finish())
    }
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        // Editors' swap and backup files are not the program.
        if name.starts_with('.') || name.ends_with('~') || name.ends_with(".swp") {
            continue;
        }
        match entry.file_type() {
            Ok(t) if t.is_dir() => collect(&path, files),
            Ok(t) if t.is_file() => files.push(path),
            _ => {}
        }
    }
}

/// Blocks until the files under `dir` differ from `last` and then stay the same for
/// [`SETTLE`]; returns what they hold then.
pub fn wait_for_change(dir: &Path, last: &Snapshot) -> Snapshot {
    loop {
        std::thread::sleep(POLL);
        let mut now = Snapshot::of(dir);
        if &now == last {
            continue;
        }
        loop {
            std::thread::sleep(SETTLE);
            let later = Snapshot::of(dir);
            if later == now {
                return now;
            }
            now = later;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_changes_count_and_touches_and_editor_files_do_not() {
        let dir = std::env::temp_dir().join(format!("checker-watch-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("src/nested")).unwrap();
        std::fs::write(dir.join("src/main.rs"), "fn main() {}\n").unwrap();
        let start = Snapshot::of(&dir.join("src"));
        // The same bytes written again: no change.
        std::fs::write(dir.join("src/main.rs"), "fn main() {}\n").unwrap();
        assert_eq!(Snapshot::of(&dir.join("src")), start);
        // Swap and backup files: no change.
        std::fs::write(dir.join("src/.main.rs.swp"), "x").unwrap();
        std::fs::write(dir.join("src/main.rs~"), "x").unwrap();
        assert_eq!(Snapshot::of(&dir.join("src")), start);
        // A new module in a subdirectory, an edit: changes.
        std::fs::write(dir.join("src/nested/util.rs"), "pub fn f() {}\n").unwrap();
        let with_module = Snapshot::of(&dir.join("src"));
        assert_ne!(with_module, start);
        std::fs::write(dir.join("src/main.rs"), "fn main() { println!(); }\n").unwrap();
        assert_ne!(Snapshot::of(&dir.join("src")), with_module);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn waits_until_a_change_has_settled() {
        let dir = std::env::temp_dir().join(format!("checker-watch-wait-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("main.rs"), "1").unwrap();
        let start = Snapshot::of(&dir);
        let writer = {
            let dir = dir.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(700));
                // Three quick writes, as an editor saving in parts: one change.
                for text in ["2", "23", "234"] {
                    std::fs::write(dir.join("main.rs"), text).unwrap();
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
        };
        let seen = wait_for_change(&dir, &start);
        writer.join().unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("main.rs")).unwrap(), "234");
        assert_eq!(seen, Snapshot::of(&dir), "returned before the writes settled");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
