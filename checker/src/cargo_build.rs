//! Building a step crate with cargo: with the checker's rights, or offline in the
//! sandbox for handed-in code; where the binary lands. Running it is
//! [`crate::observe`]'s job.
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::sandbox::{Mount, Sandbox};

/// What building a crate gave.
pub enum Build {
    Binary(PathBuf),
    /// Compiler output, as cargo printed it.
    Failed(String),
}

/// `cargo build -p <package>` in the repository, or, with `manifest_dir`, of the
/// standalone crate there (sharing the repository's target directory); the binary's
/// path, or the errors. With `sandbox`, cargo runs offline in it: it sees the
/// repository, the toolchain and the registry read-only and writes only the target
/// directory, so a submission's `include_str!` or `env!` finds nothing of the grader's.
pub fn build(
    root: &Path,
    package: &str,
    manifest_dir: Option<&Path>,
    sandbox: Option<&Sandbox>,
) -> std::io::Result<Build> {
    let target = target_dir(root);
    let mut args: Vec<OsString> =
        ["build", "--quiet", "--color", "never", "-p", package].iter().map(OsString::from).collect();
    if let Some(dir) = manifest_dir {
        args.push("--manifest-path".into());
        args.push(dir.join("Cargo.toml").into());
    }
    let workdir = manifest_dir.unwrap_or(root);
    let cmd = match sandbox {
        None => {
            // Without what cargo set for the checker itself (`cargo checker`, a test):
            // the build is then the plain `cargo build`'s, and reuses it.
            let mut cmd = child_process::cargo();
            cmd.args(&args).current_dir(workdir);
            if manifest_dir.is_some() {
                cmd.env("CARGO_TARGET_DIR", &target);
            }
            cmd
        }
        Some(sandbox) => {
            // Offline: nothing to fetch, nowhere to reach. `--locked` only in the
            // workspace: a standalone crate's lock file is the workspace's, which cargo
            // updates for the crate's own name (its dependencies are the step's).
            args.push("--offline".into());
            if manifest_dir.is_none() {
                args.push("--locked".into());
            }
            sandboxed_cargo(sandbox, root, &target, manifest_dir, &args)?
        }
    };
    // Through the launcher too: a checker stopped mid-build stops cargo and its rustcs.
    let out = child_process::output(cmd, None)?;
    if !out.success() {
        return Ok(Build::Failed(out.stderr));
    }
    Ok(Build::Binary(target.join("debug").join(package)))
}

/// cargo in a sandbox: the toolchain's own binary (not rustup's proxy), what it reads
/// mounted read-only, the target directory writable, the checker's `.checker` hidden.
fn sandboxed_cargo(
    sandbox: &Sandbox,
    root: &Path,
    target: &Path,
    manifest_dir: Option<&Path>,
    args: &[OsString],
) -> std::io::Result<Command> {
    let workdir = manifest_dir.unwrap_or(root);
    let sysroot = Command::new(std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into()))
        .args(["--print", "sysroot"])
        .output()?;
    let toolchain = PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim());
    let cargo = toolchain.join("bin").join("cargo");
    if !cargo.is_file() {
        return Err(std::io::Error::other(format!(
            "no cargo in the toolchain at {} (`rustc --print sysroot`)",
            toolchain.display()
        )));
    }
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .unwrap_or_else(|| PathBuf::from("/nonexistent"));
    let mut mounts = vec![
        Mount::ReadOnly(toolchain.clone()),
        Mount::ReadOnly(cargo_home.join("registry")),
        Mount::ReadOnly(cargo_home.join("git")),
        Mount::ReadOnly(root.to_path_buf()),
        Mount::Scratch(root.join(".checker"), 1 << 20),
        Mount::Writable(target.to_path_buf()),
    ];
    // A standalone crate's directory (the checker's own files, and the submission's
    // main.rs): cargo writes its lock file there.
    if let Some(dir) = manifest_dir {
        mounts.push(Mount::Writable(dir.to_path_buf()));
    }
    if let Ok(torch) = root.join(".libtorch").canonicalize() {
        mounts.push(Mount::ReadOnly(torch.parent().map(Path::to_path_buf).unwrap_or(torch)));
    }
    // The gloo headers where setup found them without root (the `.gloo-include` link
    // into its cache, or DDP_LAB_GLOO_INCLUDE): tch-distributed's build script reads
    // them whenever it runs again.
    let gloo_named = std::env::var_os(GLOO_INCLUDE_ENV).filter(|dir| !dir.is_empty()).map(PathBuf::from);
    for dir in gloo_named.iter().cloned().chain([root.join(".gloo-include")]) {
        if let Ok(real) = dir.canonicalize() {
            mounts.push(Mount::ReadOnly(real));
        }
    }
    // The mount point of the hidden `.checker` must exist: the repository is read-only
    // inside. (A fresh clone has none until the first run.)
    std::fs::create_dir_all(root.join(".checker"))?;
    let path = format!("{}:/usr/bin:/bin", toolchain.join("bin").display());
    let env = vec![
        ("PATH".to_string(), path),
        ("CARGO_HOME".to_string(), cargo_home.display().to_string()),
        ("CARGO_TARGET_DIR".to_string(), target.display().to_string()),
        ("HOME".to_string(), "/tmp".to_string()),
    ];
    let mut env = env;
    if let Some(dir) = gloo_named {
        env.push((GLOO_INCLUDE_ENV.to_string(), dir.display().to_string()));
    }
    Ok(sandbox.command(&cargo, args, workdir, &env, &mounts))
}

/// Where setup's gloo headers are when the system has none (tch-distributed's build.rs).
const GLOO_INCLUDE_ENV: &str = "DDP_LAB_GLOO_INCLUDE";

fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"))
}

/// Where `cargo build -p package` puts the package's binary.
pub fn binary_path(root: &Path, package: &str) -> PathBuf {
    target_dir(root).join("debug").join(package)
}

/// True when no step has been built in this target directory yet: the build then
/// compiles tch, libtorch's bindings and the lab's libraries first (minutes, not the
/// seconds of a step's own crate), and the progress says so.
pub fn first_build(root: &Path) -> bool {
    nothing_built_in(&target_dir(root))
}

fn nothing_built_in(target: &Path) -> bool {
    let deps = target.join("debug").join("deps");
    let labkit_built = std::fs::read_dir(deps).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with("liblabkit-") && name.ends_with(".rlib")
        })
    });
    !labkit_built
}

/// Builds several packages of the workspace in one cargo run (one dependency check
/// instead of one per package). False when any of them fails: each is then built on
/// its own, so that the failure is reported with its step.
pub fn build_all(root: &Path, packages: &[String]) -> bool {
    let mut cmd = child_process::cargo();
    cmd.args(["build", "--quiet", "--color", "never"]).current_dir(root);
    for package in packages {
        cmd.args(["-p", package]);
    }
    child_process::output(cmd, None).is_ok_and(|out| out.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_build_is_one_without_the_labs_libraries_built() {
        let target = tempfile::tempdir().unwrap();
        assert!(nothing_built_in(target.path()), "no target directory at all");
        let deps = target.path().join("debug/deps");
        std::fs::create_dir_all(&deps).unwrap();
        std::fs::write(deps.join("liblabkit-0123abcd.rmeta"), "").unwrap();
        assert!(nothing_built_in(target.path()), "metadata alone (cargo check) is not a build");
        std::fs::write(deps.join("liblabkit-0123abcd.rlib"), "").unwrap();
        assert!(!nothing_built_in(target.path()));
    }

    #[test]
    fn the_sandboxed_build_sees_the_gloo_headers_setup_found_without_root() {
        let root = tempfile::tempdir().unwrap();
        let cache = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(cache.path(), root.path().join(".gloo-include")).unwrap();
        let target = root.path().join("target");
        let cmd = sandboxed_cargo(&crate::sandbox::stand_in(), root.path(), &target, None, &[]).unwrap();
        let args: Vec<String> = cmd.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        let real = cache.path().canonicalize().unwrap().display().to_string();
        assert!(
            args.windows(3).any(|w| w[0] == "--ro-bind-try" && w[1] == real && w[2] == real),
            "{real} (behind .gloo-include) is not visible in the build's sandbox: {args:?}"
        );
    }
}
