//! Runs `scripts/setup.sh` as a user would, in a scratch copy of the repository (the
//! links setup makes land there, never in this checkout) with a fresh cache
//! (`DDP_LAB_CACHE`), and with an environment of the test's choosing: setup's own
//! variables and what cargo exports to tests (`LIBTORCH`, `LD_LIBRARY_PATH`) are
//! never inherited.
//!
//! setup.sh is no crate's code, so its tests live in this crate of their own, which
//! `cargo test --workspace` (and so scripts/test.sh) runs.
use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use tempfile::TempDir;

/// The repository this crate is in.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the repository")
}

/// A scratch directory holding a copy of the repository (`root`) and the path of a
/// cache that does not exist yet (`cache`); both removed when dropped.
pub struct Scratch {
    dir: TempDir,
    pub root: PathBuf,
    pub cache: PathBuf,
}

impl Scratch {
    /// What setup reads: `scripts/` and the workspace's `Cargo.toml`.
    pub fn scripts_only() -> Scratch {
        let scratch = Scratch::empty();
        let files = tracked_files();
        copy(
            files.iter().filter(|f| f.starts_with("scripts/") || f.as_os_str() == "Cargo.toml"),
            &scratch.root,
        );
        scratch
    }

    /// Every file of the checkout that git would commit (tracked, or new and not
    /// ignored): enough to build the workspace, none of this checkout's links.
    pub fn whole_source() -> Scratch {
        let scratch = Scratch::empty();
        copy(tracked_files().iter(), &scratch.root);
        scratch
    }

    fn empty() -> Scratch {
        let dir = tempfile::Builder::new().prefix("setup-test-").tempdir().expect("a scratch directory");
        let root = dir.path().join("repo");
        let cache = dir.path().join("cache");
        std::fs::create_dir(&root).expect("the copy's directory");
        Scratch { dir, root, cache }
    }

    /// A path in the scratch directory, beside the copy and the cache.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The scratch directory itself (a sandbox makes it writable).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// `bash scripts/setup.sh ARGS` in the copy, with the fresh cache and an
    /// environment cleared but for what finds the toolchain and the network. The
    /// caller adds `DDP_LAB_PYTHON` and the like.
    pub fn setup(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("bash");
        cmd.arg(self.root.join("scripts/setup.sh")).args(args);
        self.clean_env(&mut cmd);
        cmd
    }

    /// `cmd` run in the copy with the environment [`Scratch::setup`] gives.
    pub fn clean_env(&self, cmd: &mut Command) {
        cmd.current_dir(&self.root).env_clear().env("DDP_LAB_CACHE", &self.cache);
        for name in ["PATH", "HOME", "CARGO_HOME", "RUSTUP_HOME", "RUSTUP_TOOLCHAIN"].into_iter().chain([
            "http_proxy",
            "https_proxy",
            "no_proxy",
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "NO_PROXY",
        ]) {
            if let Some(value) = std::env::var_os(name) {
                cmd.env(name, value);
            }
        }
    }
}

/// PATH with `dir` first: the fake programs there win.
pub fn path_with(dir: &Path) -> OsString {
    let mut dirs = vec![dir.to_path_buf()];
    dirs.extend(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()));
    std::env::join_paths(dirs).expect("a PATH")
}

/// Writes an executable shell script `dir/name` (made with `dir`).
pub fn fake_program(dir: &Path, name: &str, script: &str) -> PathBuf {
    std::fs::create_dir_all(dir).expect("the fake programs' directory");
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).expect("a fake program");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("make it executable");
    path
}

/// The full path of `program` on PATH.
pub fn on_path(program: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?).map(|dir| dir.join(program)).find(|p| p.is_file())
}

/// How a run ended.
pub struct Run {
    pub code: Option<i32>,
    pub stderr: String,
    pub stdout: String,
}

impl Run {
    /// What it printed, for an assertion's message.
    pub fn shown(&self) -> String {
        format!("exit code {:?}\n--- stdout\n{}\n--- stderr\n{}", self.code, self.stdout, self.stderr)
    }
}

/// Runs `cmd` to its end through the launcher (it dies with the test). The limit only
/// stops a hang (a mirror that never answers); no assertion is about time.
pub fn run(cmd: Command, limit: Duration) -> Run {
    let out = child_process::output(cmd, Some(limit)).expect("start the command");
    assert!(!out.timed_out, "still running after {limit:?}, killed:\n{}", out.stderr);
    Run { code: out.status.code(), stderr: out.stderr, stdout: out.stdout }
}

/// The workspace's minimum Rust version (`rust-version` in Cargo.toml), which setup
/// must enforce.
pub fn rust_version() -> String {
    let manifest = std::fs::read_to_string(repo().join("Cargo.toml")).expect("Cargo.toml");
    quoted_value(&manifest, "rust-version").expect("rust-version in Cargo.toml")
}

/// The libtorch version setup installs (`TORCH_VERSION` in scripts/setup/torch.sh).
pub fn torch_version() -> String {
    let script =
        std::fs::read_to_string(repo().join("scripts/setup/torch.sh")).expect("scripts/setup/torch.sh");
    script
        .lines()
        .find_map(|l| l.strip_prefix("TORCH_VERSION="))
        .map(str::to_string)
        .expect("TORCH_VERSION= in scripts/setup/torch.sh")
}

fn quoted_value(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches('"').to_string())
    })
}

/// The checkout's files as git would commit them, relative to the repository.
fn tracked_files() -> Vec<PathBuf> {
    let root = repo();
    let out = Command::new("git")
        .args(["ls-files", "-z", "--cached", "--others", "--exclude-standard"])
        .current_dir(&root)
        .output()
        .expect("run git ls-files (the tests copy the checkout's files)");
    assert!(out.status.success(), "git ls-files failed: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
        .split(|b| *b == 0)
        .filter(|f| !f.is_empty())
        .map(|f| PathBuf::from(String::from_utf8_lossy(f).into_owned()))
        // A file deleted but not yet staged is still listed.
        .filter(|f| root.join(f).is_file())
        .collect()
}

fn copy<'a>(files: impl Iterator<Item = &'a PathBuf>, to: &Path) {
    let from = repo();
    for file in files {
        let target = to.join(file);
        std::fs::create_dir_all(target.parent().expect("a file has a parent"))
            .expect("a directory of the copy");
        std::fs::copy(from.join(file), &target).unwrap_or_else(|e| panic!("copy {}: {e}", file.display()));
    }
}

/// The torch setup installed for this checkout (`.venv/bin/python`), which the tests
/// hand to setup as a course's own (DDP_LAB_PYTHON) instead of downloading 4.6 GB; None
/// (the test then skips, saying `SKIPPED <what>`) unless DDP_LAB_REQUIRE_TORCH is set,
/// when its absence fails the test.
pub fn installed_python(what: &str) -> Option<PathBuf> {
    let python = repo().join(".venv/bin/python");
    if python.exists() {
        // The venv's real place (setup links `.venv` to its cache): a sandbox that hides
        // /tmp, where a clone may be, still sees it. Only the directory is resolved:
        // python finds its venv from the path it is started by.
        let venv = repo().join(".venv").canonicalize().unwrap_or_else(|_| repo().join(".venv"));
        return Some(venv.join("bin/python"));
    }
    assert!(
        std::env::var_os("DDP_LAB_REQUIRE_TORCH").is_none(),
        "{} is missing although DDP_LAB_REQUIRE_TORCH is set: run scripts/setup.sh",
        python.display()
    );
    eprintln!("SKIPPED {what}: no {} (run scripts/setup.sh)", python.display());
    None
}
