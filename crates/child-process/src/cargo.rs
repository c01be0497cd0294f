//! Cargo started by a program that cargo itself runs (a test, `cargo run -p checker`):
//! without the variables cargo sets for that program.
//!
//! Left in cargo's environment, they reach the build scripts that watch them: ring's
//! `rerun-if-env-changed` names `CARGO_MANIFEST_DIR`, `CARGO_PKG_NAME`, `OUT_DIR` and
//! more. A build started from a test then differs from a plain `cargo build` (and from
//! one started by a test of another package), and cargo rebuilds ring and everything
//! above it (rustls, ureq, labkit, every step crate, the checker) each time the two
//! alternate: minutes of CI per alternation, for bit-identical binaries.
use std::ffi::OsString;
use std::process::Command;

/// `cargo` as cargo runs it for this process (`$CARGO`, else `cargo` from PATH), with
/// the environment of this process less what [`set_by_cargo_for_its_program`] names,
/// so that its builds are the ones a plain `cargo build` makes and reuses.
///
/// ```no_run
/// // From a test: build the finished lab as `cargo build` would, reusing its build.
/// let mut build = child_process::cargo();
/// build.args(["build", "-q", "-p", "solution_11"]);
/// assert!(child_process::status(build)?.success());
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo")));
    without_the_programs_variables(&mut cmd);
    cmd
}

/// Removes from `cmd`'s environment every variable of this process that
/// [`set_by_cargo_for_its_program`] names.
fn without_the_programs_variables(cmd: &mut Command) {
    for (name, _) in std::env::vars_os() {
        if set_by_cargo_for_its_program(&name.to_string_lossy()) {
            cmd.env_remove(name);
        }
    }
}

/// What cargo sets for a program it builds or runs (`cargo run`, `cargo test`): the
/// package's own facts, which say nothing about a build that program starts.
pub fn set_by_cargo_for_its_program(name: &str) -> bool {
    const NAMES: [&str; 9] = [
        "CARGO_MANIFEST_DIR",
        "CARGO_MANIFEST_PATH",
        "CARGO_MANIFEST_LINKS",
        "CARGO_CRATE_NAME",
        "CARGO_BIN_NAME",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_TARGET_TMPDIR",
        "CARGO_RUSTC_CURRENT_DIR",
        "OUT_DIR",
    ];
    NAMES.contains(&name)
        || ["CARGO_PKG_", "CARGO_BIN_EXE_", "CARGO_CFG_"].iter().any(|prefix| name.starts_with(prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The variables `cargo test` gives this very test reach no process started that
    /// way (seen by `env` itself); what a build needs (PATH, `CARGO`, the `[env]`
    /// table's `LIBTORCH`) does.
    #[test]
    fn a_started_cargo_sees_none_of_the_variables_cargo_set_for_this_test() {
        for set in ["CARGO_MANIFEST_DIR", "CARGO_PKG_NAME", "CARGO", "PATH", "LIBTORCH"] {
            assert!(std::env::var_os(set).is_some(), "run under cargo test, which sets {set}");
        }
        let mut env = Command::new("env");
        without_the_programs_variables(&mut env);
        let out = env.output().expect("run env");
        let names: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once('=').map(|(name, _)| name.to_string()))
            .collect();
        let leaked: Vec<&String> = names.iter().filter(|n| set_by_cargo_for_its_program(n)).collect();
        assert!(leaked.is_empty(), "these would reach the started cargo: {leaked:?}");
        for kept in ["PATH", "CARGO", "LIBTORCH"] {
            assert!(names.iter().any(|n| n == kept), "{kept} must reach cargo: {names:?}");
        }
    }

    #[test]
    fn the_packages_facts_are_named_and_the_builds_settings_are_not() {
        for name in [
            "CARGO_MANIFEST_DIR",
            "CARGO_PKG_NAME",
            "CARGO_PKG_VERSION_MAJOR",
            "CARGO_BIN_EXE_checker",
            "OUT_DIR",
        ] {
            assert!(set_by_cargo_for_its_program(name), "{name}");
        }
        // The user's and the build's own settings stay.
        for name in [
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "CARGO",
            "CARGO_NET_OFFLINE",
            "CARGO_BUILD_JOBS",
            "PATH",
            "LIBTORCH",
            "RUSTFLAGS",
        ] {
            assert!(!set_by_cargo_for_its_program(name), "{name}");
        }
    }
}
