//! The real Fashion-MNIST as a user gets it offline: Debian's `dataset-fashion-mnist`
//! in the system's data-set directory, its `.gz` files recompressed (their MD5s differ
//! from the published ones), their content the published data exactly.
//!
//! These tests need that package (`scripts/setup.sh` installs it). Without it they
//! say SKIPPED and pass, unless `DDP_LAB_REQUIRE_REAL_DATA` is set (as
//! `scripts/test.sh` does), when they fail instead.

use std::path::{Path, PathBuf};

mod common;
use common::{dead_mirror, Scratch};

use labkit::data::{
    self, idx, DataError, DatasetAction, DatasetKind, DatasetOptions, DownloadOptions, FashionMnist,
    GenerateOptions, Manifest, FILES, SYSTEM_DIR,
};
use labkit::Failure;

/// The system's copy, when installed.
fn system_copy() -> Option<PathBuf> {
    let dir = PathBuf::from(SYSTEM_DIR);
    if FILES.iter().all(|f| dir.join(f).is_file()) {
        return Some(dir);
    }
    assert!(
        std::env::var_os("DDP_LAB_REQUIRE_REAL_DATA").is_none(),
        "{SYSTEM_DIR} lacks the real Fashion-MNIST although DDP_LAB_REQUIRE_REAL_DATA is set: \
         run scripts/setup.sh (it installs Debian's dataset-fashion-mnist)"
    );
    eprintln!("SKIPPED: {SYSTEM_DIR} lacks the real Fashion-MNIST (apt-get install dataset-fashion-mnist)");
    None
}

/// The real data, offline, with the published checksums in force.
fn offline(dir: &Path, kind: DatasetKind, system_dir: Option<PathBuf>) -> DatasetOptions {
    DatasetOptions {
        dir: dir.to_path_buf(),
        kind,
        download: DownloadOptions {
            mirrors: vec![dead_mirror()],
            progress: false,
            expected: Some(Manifest::published()),
            ..Default::default()
        },
        generated: GenerateOptions { train: 100, test: 20, seed: 3 },
        system_dir,
    }
}

#[test]
fn debians_copy_is_the_published_data_by_content() {
    let Some(system) = system_copy() else { return };
    let published = Manifest::published();
    for f in FILES {
        // Recompressed: the .gz differs, the content does not.
        assert_ne!(data::md5_file(&system.join(f)).unwrap(), published.md5_of(f).unwrap(), "{f}");
    }
    let set = FashionMnist::load(&system).unwrap();
    assert_eq!((set.train.len(), set.test.len()), (60_000, 10_000));
}

#[test]
fn the_system_copy_is_found_and_read_in_place() {
    let Some(system) = system_copy() else { return };
    let d = Scratch::unmade("system");
    let opts = offline(&d.0, DatasetKind::Real, Some(system.clone()));
    let ready = data::ensure_dataset(&opts).unwrap();
    assert_eq!((ready.kind_used, ready.action), (DatasetKind::Real, DatasetAction::SystemCopy));
    assert_eq!(ready.dir, system);
    assert!(ready.summary().contains(&format!("in {SYSTEM_DIR} (the system's copy")), "{}", ready.summary());
    // Nothing was written for it: not even the data directory was made.
    assert!(!d.0.exists());
    // Every rank finds the same copy again.
    let (dir, set) = data::load_ready(&opts).unwrap();
    assert_eq!((dir, set.train.len()), (system.clone(), 60_000));
    // Auto uses it too.
    let ready = data::ensure_dataset(&DatasetOptions { kind: DatasetKind::Auto, ..opts }).unwrap();
    assert_eq!((ready.kind_used, ready.dir), (DatasetKind::Real, system));
}

#[test]
fn debians_files_in_the_data_directory_are_used_and_kept() {
    let Some(system) = system_copy() else { return };
    let d = Scratch::new("in-data-dir");
    for f in FILES {
        std::fs::copy(system.join(f), d.0.join(f)).unwrap();
    }
    // Offline, no system copy to fall back on: what was given is what is used.
    let opts = offline(&d.0, DatasetKind::Real, None);
    let ready = data::ensure_dataset(&opts).unwrap();
    assert_eq!((ready.dir.as_path(), ready.action), (d.0.as_path(), DatasetAction::Present));
    for f in FILES {
        assert_eq!(
            data::md5_file(&d.0.join(f)).unwrap(),
            data::md5_file(&system.join(f)).unwrap(),
            "{f} kept"
        );
    }
    assert_eq!(data::load_ready(&opts).unwrap().0, d.0);
}

#[test]
fn a_changed_pixel_or_label_in_any_real_file_is_refused_and_kept() {
    let Some(system) = system_copy() else { return };
    for file in FILES {
        let d = Scratch::new("changed");
        for f in FILES {
            std::fs::copy(system.join(f), d.0.join(f)).unwrap();
        }
        // One byte of the last image or label changed, compressed again.
        let mut content = idx::gunzip(&std::fs::read(system.join(file)).unwrap(), Path::new(file)).unwrap();
        let last = content.len() - 1;
        content[last] ^= 1;
        std::fs::write(d.0.join(file), idx::gzip(&content)).unwrap();
        let before = std::fs::read(d.0.join(file)).unwrap();

        let opts = offline(&d.0, DatasetKind::Real, None);
        let e = data::ensure_dataset(&opts).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, DataError::DamagedKept { .. }) && e.exit_code() == 2, "{file}: {msg}");
        assert!(
            msg.contains(&d.0.join(file).display().to_string()) && msg.contains("decompressed content"),
            "{msg}"
        );
        assert_eq!(std::fs::read(d.0.join(file)).unwrap(), before, "{file} is still there, unchanged");
        let e = data::load_ready(&opts).unwrap_err();
        assert!(matches!(e, DataError::Checksum { .. }) && e.exit_code() == 2, "{e}");

        // With the system's copy installed, that copy is used and the file is left alone.
        let ready = data::ensure_dataset(&offline(&d.0, DatasetKind::Real, Some(system.clone()))).unwrap();
        assert_eq!((ready.dir.as_path(), ready.action), (system.as_path(), DatasetAction::SystemCopy));
        assert!(
            ready.summary().contains("passed over") && ready.summary().contains(file),
            "{}",
            ready.summary()
        );
        assert_eq!(std::fs::read(d.0.join(file)).unwrap(), before);
    }
}

#[test]
fn a_missing_system_copy_falls_back_as_documented() {
    // No system copy and offline: Auto uses the generated stand-in, saying why; Real
    // fails with the mirrors' answers (exit 1: the network, not the user's files).
    // Needs no real data.
    let d = Scratch::new("no-system");
    let nowhere = Some(d.0.join("no-such-system-dir"));
    let ready = data::ensure_dataset(&offline(&d.0, DatasetKind::Auto, nowhere.clone())).unwrap();
    assert_eq!((ready.kind_used, ready.action), (DatasetKind::Generated, DatasetAction::Generated));
    assert!(ready.summary().contains("could not download"), "{}", ready.summary());
    assert_eq!(data::load_ready(&offline(&d.0, DatasetKind::Auto, nowhere.clone())).unwrap().0, ready.dir);
    let e = data::ensure_dataset(&offline(&d.0, DatasetKind::Real, nowhere)).unwrap_err();
    assert!(matches!(e, DataError::AllMirrorsFailed { .. }) && e.exit_code() == 1, "{e}");
    assert!(
        e.to_string().contains("dataset-fashion-mnist") && e.to_string().contains("--dataset generated"),
        "{e}"
    );
}

#[test]
fn the_system_copy_is_not_used_when_other_checksums_are_in_force() {
    // A checker that serves its own data through DDP_LAB_MANIFEST must see its ranks
    // read that data, or fail: never the system's copy behind its back.
    let Some(system) = system_copy() else { return };
    let d = Scratch::new("override");
    let mut opts = offline(&d.0, DatasetKind::Real, Some(system));
    let other = Manifest::parse(
        &FILES.iter().map(|f| format!("{}  {f}\n", "0".repeat(32))).collect::<String>(),
        "test",
    )
    .unwrap();
    opts.download.expected = Some(other);
    let e = data::ensure_dataset(&opts).unwrap_err();
    assert!(matches!(e, DataError::AllMirrorsFailed { .. }), "{e}");
}

/// Run by `system_dir_follows_the_environment_variable` in a child process.
#[test]
fn child_prints_system_dir() {
    if std::env::var_os("LABKIT_TEST_PRINT_SYSTEM_DIR").is_some() {
        println!("SYSTEM-DIR {:?}", data::system_dir());
    }
}

#[test]
fn system_dir_follows_the_environment_variable() {
    // In a child process each: the variable changes nothing in this one.
    let child = |value: Option<&str>| {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", "child_prints_system_dir", "--nocapture", "--test-threads=1"])
            .env("LABKIT_TEST_PRINT_SYSTEM_DIR", "1")
            .env_remove(data::SYSTEM_DIR_ENV);
        if let Some(v) = value {
            cmd.env(data::SYSTEM_DIR_ENV, v);
        }
        let out = String::from_utf8(cmd.output().unwrap().stdout).unwrap();
        out.split("SYSTEM-DIR ").nth(1).and_then(|r| r.lines().next()).unwrap().to_string()
    };
    assert_eq!(child(None), format!("Some({SYSTEM_DIR:?})"));
    assert_eq!(child(Some("/srv/fmnist")), "Some(\"/srv/fmnist\")");
    assert_eq!(child(Some("")), "None");
}
