//! `checker verify step N --crate DIR`: checks a step's program that lives outside the
//! workspace (a copy handed in for grading, a test's broken variant).
//!
//! Only the program (the `main.rs` that `handed_in` finds) is taken from DIR: it is
//! built in a crate the checker makes under `target/checker-crates/`, with the step
//! crate's own manifest and build script, so a copy cannot change its dependencies. That crate is its own workspace
//! and shares the repository's target directory, so dependencies build once.
use std::hash::Hasher;
use std::path::{Path, PathBuf};

use crate::handed_in;

/// A crate ready for `cargo build`.
pub struct Standalone {
    /// Where its Cargo.toml is.
    pub dir: PathBuf,
    pub package: String,
    /// The program that was taken.
    pub source: String,
}

/// Makes the crate that builds the program in `given` (a crate folder, a `main.rs`,
/// a `.zip`: see `handed_in`) as step `step`'s program.
pub fn prepare(root: &Path, step: u8, given: &Path) -> Result<Standalone, String> {
    let source = handed_in::find(given, step).map_err(|refusal| refusal.message().to_string())?.source;
    let step_dir = root.join(format!("steps/step_{step:02}"));
    let manifest = std::fs::read_to_string(step_dir.join("Cargo.toml"))
        .map_err(|e| format!("cannot read {}/Cargo.toml: {e}", step_dir.display()))?;
    let build_rs = std::fs::read_to_string(step_dir.join("build.rs"))
        .map_err(|e| format!("cannot read {}/build.rs: {e}", step_dir.display()))?;
    let workspace = std::fs::read_to_string(root.join("Cargo.toml"))
        .map_err(|e| format!("cannot read the workspace's Cargo.toml: {e}"))?;
    // One crate (and binary) per given directory, so that checks of two copies, even
    // at the same time, do not mix.
    let key = fnv(&given.canonicalize().unwrap_or_else(|_| given.to_path_buf()).display().to_string());
    let package = format!("checked_step_{step:02}_{:08x}", key >> 32);
    let manifest = standalone_manifest(&manifest, &workspace, root, &package)?;
    let dir = root.join("target").join("checker-crates").join(&package);
    let write = |rel: &str, text: &str| -> Result<(), String> {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        // Unchanged files keep their times, so cargo does not rebuild for nothing.
        if std::fs::read_to_string(&path).ok().as_deref() == Some(text) {
            return Ok(());
        }
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
    };
    write("Cargo.toml", &manifest)?;
    write("build.rs", &build_rs)?;
    write("src/main.rs", &source)?;
    // The workspace's lock file: the same dependency versions, and no network needed.
    if let Ok(lock) = std::fs::read_to_string(root.join("Cargo.lock")) {
        if !dir.join("Cargo.lock").exists() {
            write("Cargo.lock", &lock)?;
        }
    }
    Ok(Standalone { dir, package, source })
}

/// The step crate's manifest made independent of the workspace: its own name, the
/// workspace's inherited values spelled out, absolute paths, and an empty
/// `[workspace]` table so cargo does not look for a parent workspace.
fn standalone_manifest(
    manifest: &str,
    workspace: &str,
    root: &Path,
    package: &str,
) -> Result<String, String> {
    let inherited = |key: &str| -> Result<String, String> {
        workspace
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once('=')?;
                (k.trim() == key).then(|| v.trim().to_string())
            })
            .ok_or_else(|| format!("the workspace's Cargo.toml does not define `{key}`"))
    };
    let crates = root.join("crates");
    let mut out = String::new();
    for line in manifest.lines() {
        let trimmed = line.trim();
        let line = if trimmed.starts_with("name = ") {
            format!("name = \"{package}\"")
        } else if trimmed == "edition.workspace = true" {
            format!("edition = {}", inherited("edition")?)
        } else if trimmed.ends_with(".workspace = true") {
            let key = trimmed.trim_end_matches(".workspace = true");
            if key == "license" || key == "rust-version" {
                continue;
            }
            format!("{key} = {}", inherited(key)?)
        } else {
            line.replace("\"../../crates/", &format!("\"{}/", crates.display()))
        };
        out.push_str(&line);
        out.push('\n');
    }
    out.push_str("\n[workspace]\n");
    out.push_str(&profiles(workspace));
    Ok(out)
}

/// The workspace's `[profile…]` sections, verbatim. Built with the same profiles, the
/// crate's dependencies are the workspace's already compiled ones (same cargo
/// fingerprints in the shared target directory), not another copy of the whole tree.
fn profiles(workspace: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in workspace.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('[') {
            inside = trimmed.starts_with("[profile.");
            if inside {
                out.push('\n');
            }
        }
        if inside && !trimmed.is_empty() && !trimmed.starts_with('#') {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// FNV-1a, for a short stable directory name.
fn fnv(text: &str) -> u64 {
    let mut hash = fnv::FnvHasher::default();
    hash.write(text.as_bytes());
    hash.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manifest_stands_alone() {
        let workspace = "[workspace.package]\nedition = \"2021\"\nlicense = \"MIT\"\n\n[workspace.dependencies]\ntch = \"=0.24.0\"\nclap = { version = \"4\", features = [\"derive\"] }\n";
        let manifest = "[package]\nname = \"step_07\"\nedition.workspace = true\nlicense.workspace = true\n\n[dependencies]\nlabkit = { path = \"../../crates/labkit\" }\ntch.workspace = true\nclap.workspace = true\n";
        let out = standalone_manifest(manifest, workspace, Path::new("/repo"), "checked_step_07").unwrap();
        assert_eq!(
            out,
            "[package]\nname = \"checked_step_07\"\nedition = \"2021\"\n\n[dependencies]\nlabkit = { path = \"/repo/crates/labkit\" }\ntch = \"=0.24.0\"\nclap = { version = \"4\", features = [\"derive\"] }\n\n[workspace]\n"
        );
    }

    #[test]
    fn the_workspaces_profiles_come_along() {
        let workspace = "[workspace.package]\nedition = \"2021\"\n\n# why\n[profile.dev]\ndebug = \"line-tables-only\"\n\n[profile.dev.package.labkit]\nopt-level = 2\n[workspace.dependencies]\ntch = \"=0.24.0\"\n";
        let out =
            standalone_manifest("[package]\nname = \"step_07\"\n", workspace, Path::new("/r"), "p").unwrap();
        assert_eq!(
            out,
            "[package]\nname = \"p\"\n\n[workspace]\n\n[profile.dev]\ndebug = \"line-tables-only\"\n\n[profile.dev.package.labkit]\nopt-level = 2\n"
        );
    }

    #[test]
    fn an_undefined_inherited_key_is_an_error() {
        let err = standalone_manifest("serde.workspace = true\n", "", Path::new("/r"), "p").unwrap_err();
        assert!(err.contains("`serde`"), "{err}");
    }
}
