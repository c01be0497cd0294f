//! Fixtures shared by labkit's data tests (data.rs, real_data.rs).
#![allow(dead_code)] // each test file uses its own part

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh directory under the target dir, removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    /// A fresh, empty directory.
    pub fn new(name: &str) -> Scratch {
        let scratch = Scratch::unmade(name);
        std::fs::create_dir_all(&scratch.0).unwrap();
        scratch
    }

    /// A fresh path whose directory does not exist yet (for code that must not make it).
    pub fn unmade(name: &str) -> Scratch {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "labkit-data-{name}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A base URL on which nothing listens: offline, as far as the data is concerned.
pub fn dead_mirror() -> String {
    let port = child_process::free_port().unwrap();
    format!("http://127.0.0.1:{port}/fashion/")
}
