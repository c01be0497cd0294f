//! What setup refuses, with exit 2 and a message saying what to do, before it changes
//! anything: too old a Rust, a DDP_LAB_GLOO_INCLUDE without the headers, an unknown
//! option.
use std::time::Duration;

use setup_tests::{fake_program, path_with, run, rust_version, Run, Scratch};

const LIMIT: Duration = Duration::from_secs(120);

/// A fake `rustc` that answers `--version` as a toolchain of `version` would.
fn with_rustc(scratch: &Scratch, version: &str) -> std::ffi::OsString {
    let bin = scratch.path("bin");
    fake_program(&bin, "rustc", &format!("echo 'rustc {version} (0123456789 2024-01-01)'"));
    path_with(&bin)
}

/// Nothing was made: no cache, no link in the copy.
fn nothing_made(scratch: &Scratch, run: &Run) {
    assert!(
        !scratch.cache.exists(),
        "the refusal made the cache {}\n{}",
        scratch.cache.display(),
        run.shown()
    );
    for link in [".libtorch", ".venv", ".gloo-include", ".mdbook"] {
        assert!(
            scratch.root.join(link).symlink_metadata().is_err(),
            "the refusal made {link}\n{}",
            run.shown()
        );
    }
}

#[test]
fn an_older_rust_is_refused_naming_both_versions() {
    let needed = rust_version();
    let (major, minor) = needed.split_once('.').expect("rust-version is major.minor");
    let minor: u32 = minor.split('.').next().unwrap().parse().expect("a minor version");
    assert!(minor > 0, "rust-version {needed}: this test needs a release before it");
    let older = format!("{major}.{}.3", minor - 1);

    let scratch = Scratch::scripts_only();
    let mut cmd = scratch.setup(&[]);
    cmd.env("PATH", with_rustc(&scratch, &older));
    let run = run(cmd, LIMIT);
    assert_eq!(run.code, Some(2), "{}", run.shown());
    for words in
        [format!("Rust {older} is too old"), format!("needs Rust {needed} or newer"), "rustup update".into()]
    {
        assert!(run.stderr.contains(&words), "the refusal should say {words:?}\n{}", run.shown());
    }
    nothing_made(&scratch, &run);
}

#[test]
fn a_newer_rust_passes_compared_as_numbers() {
    // 1.100 sorts before 1.85 as text. Setup is stopped right after the Rust check, by
    // a DDP_LAB_GLOO_INCLUDE without headers: the refusal must be that one.
    let needed = rust_version();
    let major = needed.split('.').next().unwrap();
    let scratch = Scratch::scripts_only();
    let empty = scratch.path("no-headers");
    std::fs::create_dir(&empty).unwrap();
    let mut cmd = scratch.setup(&[]);
    cmd.env("PATH", with_rustc(&scratch, &format!("{major}.100.0"))).env("DDP_LAB_GLOO_INCLUDE", &empty);
    let run = run(cmd, LIMIT);
    assert_eq!(run.code, Some(2), "{}", run.shown());
    assert!(!run.stderr.contains("too old"), "Rust {major}.100.0 is newer than {needed}\n{}", run.shown());
    assert!(run.stderr.contains("DDP_LAB_GLOO_INCLUDE"), "{}", run.shown());
}

#[test]
fn a_gloo_include_without_the_headers_is_refused() {
    let scratch = Scratch::scripts_only();
    let empty = scratch.path("no-headers");
    std::fs::create_dir(&empty).unwrap();
    let mut cmd = scratch.setup(&[]);
    cmd.env("DDP_LAB_GLOO_INCLUDE", &empty);
    let run = run(cmd, LIMIT);
    assert_eq!(run.code, Some(2), "{}", run.shown());
    let words = format!("DDP_LAB_GLOO_INCLUDE={} holds no gloo/algorithm.h", empty.display());
    assert!(run.stderr.contains(&words), "the refusal should say {words:?}\n{}", run.shown());
    nothing_made(&scratch, &run);
}

#[test]
fn an_unknown_option_is_refused_with_the_usage() {
    let scratch = Scratch::scripts_only();
    let run = run(scratch.setup(&["--for-test"]), LIMIT);
    assert_eq!(run.code, Some(2), "{}", run.shown());
    assert!(run.stderr.contains("unknown option '--for-test'"), "{}", run.shown());
    assert!(run.stderr.contains("--for-tests"), "the usage lists the options\n{}", run.shown());
    nothing_made(&scratch, &run);
}

#[test]
fn help_names_both_modes_and_the_variables() {
    let scratch = Scratch::scripts_only();
    let run = run(scratch.setup(&["--help"]), LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.shown());
    for words in
        ["--for-tests", "DDP_LAB_CACHE", "DDP_LAB_PYTHON", "DDP_LAB_GLOO_INCLUDE", "Nothing needs root"]
    {
        assert!(run.stdout.contains(words), "--help should mention {words:?}\n{}", run.shown());
    }
    nothing_made(&scratch, &run);
}
