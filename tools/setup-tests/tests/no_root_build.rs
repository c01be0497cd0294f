//! Setup without root: on Debian/Ubuntu a user who cannot install packages still gets
//! the gloo headers (downloaded and unpacked into the cache) and a build of
//! tch-distributed, whose C++ shim includes them.
//!
//! The run happens in a bubblewrap sandbox that makes this true whoever runs the test:
//! uid 1000 (so setup takes the unprivileged path, and sudo cannot elevate under
//! no_new_privs), the whole system read-only (apt-get cannot install; the dpkg
//! database cannot change), the system's gloo headers (and Debian's copy of the data
//! set) hidden under an empty tmpfs, and only the scratch directory writable (copy, fresh cache, target directory).
//! The network stays: `apt-get download` needs a Debian mirror. DDP_LAB_PYTHON names
//! the torch setup already installed, so nothing of 4.6 GB is downloaded.
//!
//! Where bubblewrap cannot make that sandbox the test says SKIPPED, unless
//! DDP_LAB_REQUIRE_SANDBOX is set (scripts/test.sh sets it): then it fails.
//! It builds tch-distributed's C++ from scratch (`cargo check`): a minute or two, the
//! one such build of the suite.
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use setup_tests::{installed_python, on_path, run, Scratch};

/// Directories whose gloo headers the compiler would find on its own.
const SYSTEM_GLOO: [&str; 2] = ["/usr/include/gloo", "/usr/local/include/gloo"];
/// Debian's copy of the real data set, hidden too: setup must skip installing it in
/// one line and go on.
const SYSTEM_DATA: &str = "/usr/share/datasets/fashion-mnist";

/// bubblewrap's arguments for a user without root on this system (see the crate docs
/// above), `scratch` writable.
fn no_root(scratch: &Path) -> Vec<String> {
    let mut args: Vec<String> =
        ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
            .map(String::from)
            .into();
    for dir in SYSTEM_GLOO.iter().chain([&SYSTEM_DATA]).filter(|d| Path::new(d).is_dir()) {
        args.extend(["--tmpfs".into(), dir.to_string()]);
    }
    let scratch = scratch.display().to_string();
    args.extend(["--bind".into(), scratch.clone(), scratch]);
    args.extend(["--unshare-user", "--uid", "1000", "--gid", "1000", "--die-with-parent"].map(String::from));
    args
}

/// Whether bubblewrap can make that sandbox here; else SKIPPED, or a failure under
/// DDP_LAB_REQUIRE_SANDBOX.
fn sandbox_works() -> bool {
    let works = on_path("bwrap").is_some()
        && Command::new("bwrap")
            .args(no_root(Path::new("/tmp")))
            .arg("true")
            .status()
            .is_ok_and(|s| s.success());
    if !works {
        assert!(
            std::env::var_os("DDP_LAB_REQUIRE_SANDBOX").is_none(),
            "DDP_LAB_REQUIRE_SANDBOX is set but bubblewrap cannot make the no-root sandbox here \
             (user namespaces forbidden, or no bwrap): run scripts/setup.sh --for-tests"
        );
        eprintln!(
            "SKIPPED setup without root: bubblewrap cannot make a sandbox here (install Debian's bubblewrap)"
        );
    }
    works
}

fn sandboxed(scratch: &Scratch, program: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new("bwrap");
    cmd.args(no_root(scratch.dir())).arg("--chdir").arg(&scratch.root).arg("--").arg(program).args(args);
    scratch.clean_env(&mut cmd);
    cmd
}

#[test]
fn setup_and_build_without_root_with_the_system_gloo_headers_hidden() {
    if !sandbox_works() {
        return;
    }
    if on_path("apt-get").is_none() || on_path("dpkg-deb").is_none() {
        eprintln!("SKIPPED setup without root: not Debian or Ubuntu (no apt-get or dpkg-deb)");
        return;
    }
    let Some(python) = installed_python("setup without root") else { return };
    let scratch = Scratch::whole_source();

    // The premise, checked inside the very sandbox: not root, no gloo headers to find,
    // and the dpkg database cannot change (so nothing can be installed).
    let mut premise = sandboxed(
        &scratch,
        "bash",
        &["-c", "test \"$(id -u)\" != 0 && ! test -e /usr/include/gloo/algorithm.h && ! test -e /usr/local/include/gloo/algorithm.h && ! test -w /var/lib/dpkg/status"],
    );
    assert!(premise.status().expect("run bwrap").success(), "the sandbox is not what this test needs");

    let mut setup = sandboxed(&scratch, "bash", &["scripts/setup.sh"]);
    setup.env("DDP_LAB_PYTHON", &python);
    let setup = run(setup, Duration::from_secs(600));
    assert_eq!(setup.code, Some(0), "setup without root failed:\n{}", setup.shown());

    // The crate's C++ shim compiled against the headers, from nothing, as a user's first
    // build would: `cargo check` runs the same build scripts (libtorch's and the shim's
    // C++ compiles, the only part the headers touch) and leaves out the Rust crates'
    // code generation, which the headers cannot change.
    let target = scratch.path("target").display().to_string();
    let mut build = sandboxed(&scratch, "cargo", &["check", "--offline", "-p", "tch-distributed"]);
    build.env("CARGO_TARGET_DIR", &target);
    let build = run(build, Duration::from_secs(2400));
    assert_eq!(build.code, Some(0), "cargo check -p tch-distributed failed without root:\n{}", build.shown());

    // How it got there: the headers were downloaded into the fresh cache, and no venv
    // was made.
    assert!(
        setup.stderr.contains("no root needed"),
        "setup should say it downloaded the headers:\n{}",
        setup.shown()
    );
    let headers = scratch.root.join(".gloo-include");
    let cached = scratch.cache.canonicalize().unwrap();
    assert!(
        headers.canonicalize().is_ok_and(|dir| dir.starts_with(&cached))
            && headers.join("gloo/algorithm.h").is_file(),
        ".gloo-include should lead to the headers in the fresh cache {}:\n{}",
        cached.display(),
        setup.shown()
    );
    assert!(!scratch.cache.join("venv").exists(), "DDP_LAB_PYTHON was given: no venv\n{}", setup.shown());
    // The data set's package could not be installed: one line says so and what is lost.
    let skipped: Vec<&str> = setup
        .stderr
        .lines()
        .filter(|l| l.contains("Fashion-MNIST") || l.contains("dataset-fashion-mnist"))
        .collect();
    assert!(
        skipped.len() == 1
            && skipped[0].starts_with("setup: skipped the real Fashion-MNIST")
            && skipped[0].contains("needs root")
            && skipped[0].contains("Without it:"),
        "setup should skip the data set in one line saying why and what is lost:\n{}",
        setup.shown()
    );
}
