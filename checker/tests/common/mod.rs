//! Shared by the checker's integration tests: running the real binary, and making
//! variants of the reference solutions for `verify --crate`.
#![allow(dead_code)]
use std::path::{Path, PathBuf};
use std::process::Command;

pub mod formats;
pub mod variants;

pub fn repo() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// The solution of `step` with `from` (which must occur exactly once) replaced by
/// `to`, as a crate directory holding only `src/main.rs`.
pub fn variant(step: u8, name: &str, from: &str, to: &str) -> PathBuf {
    // A stable place per variant: the checker reuses its build next time.
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("variants").join(name);
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(dir.join("src/main.rs"), variant_source(step, from, to)).unwrap();
    dir
}

/// The program text of that variant, without writing it anywhere (tests that only
/// read it must not race one that writes its crate).
pub fn variant_source(step: u8, from: &str, to: &str) -> String {
    let source = std::fs::read_to_string(
        repo().join(lab_course::Version::Solution(step).crate_dir()).join("src/main.rs"),
    )
    .unwrap();
    assert_eq!(source.matches(from).count(), 1, "solution {step} must contain `{from}` exactly once");
    source.replace(from, to)
}

pub struct Verdict {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Verdict {
    pub fn output(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }

    /// The ids of the checks reported as failing: each one's report begins as rustc's
    /// errors do, `error[metrics-averaged]: step 9: ...`.
    pub fn failed(&self) -> Vec<String> {
        self.stdout
            .lines()
            .filter_map(|l| l.strip_prefix("error["))
            .filter_map(|l| l.split_once("]: step ").map(|(id, _)| id.to_string()))
            .collect()
    }
}

/// The checker with `args`, from the repository, keeping its verdicts out of the
/// repository's progress file.
pub fn checker(args: &[&str]) -> Verdict {
    checker_with(args, &[])
}

pub fn checker_with(args: &[&str], paths: &[&Path]) -> Verdict {
    checker_env(args, paths, &[])
}

/// The checker, writing the observation it judges to `file` (the judges' fixtures).
pub fn checker_recording(args: &[&str], paths: &[&Path], file: &Path) -> Verdict {
    checker_env(args, paths, &[(checker::RECORD_OBSERVATION_ENV, file)])
}

/// The checker with [`checker::TIMINGS_ENV`] set: stderr names each phase as it ends
/// (`[timing] 2.1 s  building checked_step_00_1f70156b`).
pub fn checker_timed(args: &[&str]) -> Verdict {
    checker_env(args, &[], &[(checker::TIMINGS_ENV, Path::new("1"))])
}

/// The checker these tests run: a copy, made once per test binary, of the one cargo
/// built for them. Some tests run what a platform runs, `cargo build -p checker` or
/// `cargo checker` included, and such a build (no dev-dependencies, so other features)
/// replaces the workspace's checker binary while the other tests of the binary start it.
pub fn checker_binary() -> &'static Path {
    static COPY: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    COPY.get_or_init(|| {
        // Named for the test binary (without cargo's hash), so that runs reuse one file.
        let me = std::env::current_exe().unwrap();
        let stem = me.file_stem().unwrap().to_string_lossy().into_owned();
        let name = stem.rsplit_once('-').map_or(stem.as_str(), |(name, _)| name).to_string();
        let copy = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("checker-for-{name}"));
        let partial = copy.with_extension("partial");
        std::fs::copy(env!("CARGO_BIN_EXE_checker"), &partial).unwrap();
        std::fs::rename(&partial, &copy).unwrap();
        copy
    })
}

fn checker_env(args: &[&str], paths: &[&Path], env: &[(&str, &Path)]) -> Verdict {
    let progress = std::env::temp_dir().join(format!("checker-test-progress-{}.json", std::process::id()));
    let mut cmd = Command::new(checker_binary());
    cmd.current_dir(repo()).args(args).args(paths).env(checker::PROGRESS_FILE_ENV, &progress);
    cmd.envs(env.iter().copied());
    // Through the launcher: a test binary that dies takes the checker and its ranks along.
    let out = child_process::output(cmd, None).expect("run the checker");
    let _ = std::fs::remove_file(&progress);
    Verdict { code: out.status.code(), stdout: out.stdout, stderr: out.stderr }
}

/// Whether bubblewrap can make a sandbox on this machine. Where it cannot, a test that
/// needs one skips, saying so, unless `DDP_LAB_REQUIRE_SANDBOX` is set
/// (scripts/test.sh sets it): then it fails, naming the fix.
pub fn sandbox_works() -> bool {
    let works = Command::new("bwrap")
        .args(["--unshare-all", "--unshare-user", "--die-with-parent", "--ro-bind", "/", "/", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !works {
        assert!(
            std::env::var("DDP_LAB_REQUIRE_SANDBOX").is_err(),
            "DDP_LAB_REQUIRE_SANDBOX is set but bubblewrap cannot make a sandbox here: run scripts/setup.sh --for-tests"
        );
        eprintln!("skipped: bubblewrap cannot make a sandbox on this machine (install Debian's bubblewrap)");
    }
    works
}

/// A gradebook CSV's rows (the header first), read as RFC 4180 says (quoted fields
/// unquoted, a comma inside quotes kept).
pub fn gradebook(path: &Path) -> Vec<Vec<String>> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .from_path(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    reader.records().map(|r| r.unwrap().iter().map(String::from).collect()).collect()
}
