//! Which sources make a lab program, and their hash: the course revision that the
//! `revision` module embeds in every program. Also compiled into labkit's build
//! script (`#[path]`), which computes the revision at build time; std only.
use std::path::Path;

/// The sources a lab program is made of, relative to the workspace root: the library
/// crates every step and solution links (labkit, tch-distributed and its C++ shim, and
/// the crates they use) and the master the steps and solutions are generated from.
/// Not in it: the checker (the programs do not change with it), the students' edits of
/// `steps/` (a student's program is still of the course's revision), tests and
/// examples, and `Cargo.lock` (the dependencies that matter rebuild labkit anyway; the
/// libtorch version is checked on its own, when the program loads it).
pub const PATHS: &[&str] = &[
    "course/lab",
    "crates/labkit/Cargo.toml",
    "crates/labkit/build.rs",
    "crates/labkit/src",
    "crates/tch-distributed/Cargo.toml",
    "crates/tch-distributed/build.rs",
    "crates/tch-distributed/src",
    "crates/tch-distributed/shim",
    "crates/lab-trace/Cargo.toml",
    "crates/lab-trace/src",
    "crates/atomic-file/Cargo.toml",
    "crates/atomic-file/src",
    "crates/child-process/Cargo.toml",
    "crates/child-process/src",
];

/// The revision of the course whose workspace is `root`: 16 hex digits of a 64-bit
/// FNV-1a hash over every file under [`PATHS`] (hidden files aside), in the order of
/// their paths, each as its path, its length and its bytes. It depends on the files'
/// contents and names only (not on times, the checkout's place or git), so two checkouts
/// of one commit agree.
pub fn revision_of(root: &Path) -> std::io::Result<String> {
    let mut files = Vec::new();
    for rel in PATHS {
        collect(root, Path::new(rel), &mut files)?;
    }
    files.sort();
    let mut hash = Fnv::new();
    for rel in &files {
        let bytes = std::fs::read(root.join(rel))?;
        hash.write(rel.as_bytes());
        hash.write(&[0]);
        hash.write(&(bytes.len() as u64).to_le_bytes());
        hash.write(&bytes);
    }
    Ok(format!("{:016x}", hash.0))
}

/// The files under `rel` (a file or a folder), as `/`-separated paths from `root`; a
/// path that does not exist adds none.
fn collect(root: &Path, rel: &Path, files: &mut Vec<String>) -> std::io::Result<()> {
    let path = root.join(rel);
    let Ok(meta) = std::fs::metadata(&path) else { return Ok(()) };
    if meta.is_file() {
        files.push(rel.to_string_lossy().replace('\\', "/"));
    } else if meta.is_dir() {
        for entry in std::fs::read_dir(&path)? {
            let name = entry?.file_name();
            if name.to_string_lossy().starts_with('.') {
                continue;
            }
            collect(root, &rel.join(name), files)?;
        }
    }
    Ok(())
}

/// FNV-1a, 64 bits.
struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}
