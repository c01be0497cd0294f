//! `checker verify step N --crate DIR`: checks a step's program that lives outside the
//! workspace (a copy handed in for grading, a test's broken variant).
//!
//! Only the program (the `main.rs` that `handed_in` finds) is taken from DIR: it is
//! built in a crate the checker makes under `target/checker-crates/`, with the step
//! crate's own manifest and build script, so a copy cannot change its dependencies. That crate is its own workspace
//! and shares the repository's target directory, so dependencies build once.
use std::hash::Hasher;
use std::path::{Component, Path, PathBuf};

use toml_edit::{value, DocumentMut, InlineTable, Item, Table, TableLike, Value};

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
    let step_dir = root.join(lab_course::Version::Starter(step).crate_dir());
    let manifest = std::fs::read_to_string(step_dir.join("Cargo.toml"))
        .map_err(|e| format!("cannot read {}/Cargo.toml: {e}", step_dir.display()))?;
    let build_rs = std::fs::read_to_string(step_dir.join("build.rs"))
        .map_err(|e| format!("cannot read {}/build.rs: {e}", step_dir.display()))?;
    let workspace = std::fs::read_to_string(root.join("Cargo.toml"))
        .map_err(|e| format!("cannot read the workspace's Cargo.toml: {e}"))?;
    // One crate (and binary) per given directory, so that checks of two copies, even
    // at the same time, do not mix.
    let key = fnv(&given.canonicalize().unwrap_or_else(|_| given.to_path_buf()).display().to_string());
    let package = format!("checked_{}_{:08x}", lab_course::Version::Starter(step).package_name(), key >> 32);
    let manifest = standalone_manifest(&manifest, &workspace, root, step, &package)?;
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
/// workspace's inherited values spelled out, dependency paths made absolute, an empty
/// `[workspace]` table so cargo does not look for a parent workspace, and the
/// workspace's `[profile]` tables. Built with the same profiles, the crate's
/// dependencies are the workspace's already compiled ones (same cargo fingerprints in
/// the shared target directory), not another copy of the whole tree.
///
/// Edited as TOML (toml_edit), not as lines: each key is changed in the table it
/// belongs to, whatever other table has a key of the same name, paths are written as
/// TOML strings (a quote, a backslash or a space in the repository's path is escaped),
/// and the comments and layout of the step's manifest stay.
fn standalone_manifest(
    manifest: &str,
    workspace: &str,
    root: &Path,
    step: u8,
    package: &str,
) -> Result<String, String> {
    let step_dir = root.join(lab_course::Version::Starter(step).crate_dir());
    let mut doc = manifest.parse::<DocumentMut>().map_err(|e| {
        format!(
            "{}/Cargo.toml is not valid TOML, so handed-in code cannot be built with it: {e}\
             undo the edit, or restore the step's starter with `cargo checker reset step {step}` \
             (it keeps a backup of your files)",
            step_dir.display()
        )
    })?;
    let workspace = workspace
        .parse::<DocumentMut>()
        .map_err(|e| format!("{}/Cargo.toml (the workspace's) is not valid TOML: {e}", root.display()))?;
    let package_table = doc
        .get_mut("package")
        .and_then(Item::as_table_like_mut)
        .ok_or_else(|| format!("{}/Cargo.toml has no [package] table", step_dir.display()))?;
    package_table.insert("name", value(package));
    for key in inheriting(&*package_table) {
        // Neither matters to a crate that is only built here, and the workspace need
        // not define them.
        if key == "license" || key == "rust-version" {
            package_table.remove(&key);
            continue;
        }
        let inherited = workspace_value(&workspace, "package", &key)?;
        replace(package_table, &key, inherited);
    }
    for table in dependency_tables(&mut doc) {
        for name in table.iter().map(|(name, _)| name.to_string()).collect::<Vec<_>>() {
            let item = table.get(&name).expect("a key just listed");
            let (mut dependency, base) = if inherits(item) {
                (inherited_dependency(&workspace, &name, item)?, root)
            } else {
                match item.as_value() {
                    Some(v) => (v.clone(), step_dir.as_path()),
                    None => continue,
                }
            };
            absolute_path(&mut dependency, base)?;
            replace(table, &name, dependency);
        }
    }
    // The step's one binary (its `[[bin]]` says `test = false`) is named for the package
    // as well: the checker runs target/debug/<package>, and two checked copies must not
    // write the same binary.
    if let Some(bins) = doc.get_mut("bin").and_then(Item::as_array_of_tables_mut) {
        for bin in bins.iter_mut() {
            bin.insert("name", value(package));
        }
    }
    doc.insert("workspace", Item::Table(Table::new()));
    if let Some(profile) = workspace.get("profile") {
        doc.insert("profile", profile.clone());
    }
    Ok(doc.to_string())
}

/// Sets `table[key]` to `value` where the key is, keeping the comment above it. The
/// comment above a dotted key (`tch.workspace = true`) is held by its last part
/// (`workspace`), which goes: it moves to `tch`.
fn replace(table: &mut dyn TableLike, key: &str, value: Value) {
    let item = table.get_mut(key).expect("the key is in the table");
    let comment = match &*item {
        Item::Table(dotted) if dotted.is_dotted() => dotted
            .iter()
            .next()
            .and_then(|(part, _)| dotted.key(part))
            .and_then(|k| k.leaf_decor().prefix().cloned()),
        _ => None,
    };
    *item = Item::Value(value.decorated(" ", ""));
    if let (Some(comment), Some(mut key)) = (comment, table.key_mut(key)) {
        key.leaf_decor_mut().set_prefix(comment);
    }
}

/// `key.workspace = true` (or `key = { workspace = true, ... }`).
fn inherits(item: &Item) -> bool {
    item.as_table_like().and_then(|t| t.get("workspace")).and_then(Item::as_bool) == Some(true)
}

/// The keys of `table` that inherit their value from the workspace.
fn inheriting(table: &dyn TableLike) -> Vec<String> {
    table.iter().filter(|(_, item)| inherits(item)).map(|(key, _)| key.to_string()).collect()
}

/// `[workspace.<table>].key`, as a value to put in the crate's manifest.
fn workspace_value(workspace: &DocumentMut, table: &str, key: &str) -> Result<Value, String> {
    let item = workspace.get("workspace").and_then(|w| w.get(table)).and_then(|t| t.get(key));
    let value = match item {
        Some(Item::Value(v)) => Some(v.clone()),
        // `[workspace.dependencies.foo]` written as a table of its own.
        Some(Item::Table(t)) => Some(Value::InlineTable(t.clone().into_inline_table())),
        _ => None,
    };
    value.map(|v| v.decorated(" ", "")).ok_or_else(|| {
        format!(
            "the workspace's Cargo.toml does not define `{key}` in [workspace.{table}], which the step's \
             manifest inherits (`{key}.workspace = true`)"
        )
    })
}

/// An inherited dependency spelled out: the workspace's entry, plus what the crate
/// adds to it (`features` are added to the workspace's, `optional` is the crate's).
fn inherited_dependency(workspace: &DocumentMut, name: &str, item: &Item) -> Result<Value, String> {
    let inherited = workspace_value(workspace, "dependencies", name)?;
    let local = item.as_table_like().expect("an inheriting dependency is a table");
    let added: Vec<(&str, &Item)> = local.iter().filter(|(key, _)| *key != "workspace").collect();
    if added.is_empty() {
        return Ok(inherited);
    }
    let mut merged = match inherited {
        Value::InlineTable(t) => t,
        version => {
            let mut t = InlineTable::new();
            t.insert("version", version.decorated(" ", ""));
            t
        }
    };
    for (key, item) in added {
        let Some(v) = item.as_value() else { continue };
        match (key, merged.get_mut("features").and_then(Value::as_array_mut), v.as_array()) {
            ("features", Some(features), Some(more)) => features.extend(more.iter().cloned()),
            _ => {
                merged.insert(key, v.clone().decorated(" ", ""));
            }
        }
    }
    Ok(Value::InlineTable(merged))
}

/// Every dependency table of the manifest: `[dependencies]`, `[dev-dependencies]`,
/// `[build-dependencies]`, and the same under each `[target.'cfg(..)']`.
fn dependency_tables(doc: &mut DocumentMut) -> Vec<&mut dyn TableLike> {
    const KINDS: [&str; 3] = ["dependencies", "dev-dependencies", "build-dependencies"];
    let mut tables = Vec::new();
    for (key, item) in doc.as_table_mut().iter_mut() {
        if KINDS.contains(&key.get()) {
            tables.extend(item.as_table_like_mut());
        } else if key.get() == "target" {
            for (_, platform) in item.as_table_like_mut().into_iter().flat_map(|t| t.iter_mut()) {
                for (kind, deps) in platform.as_table_like_mut().into_iter().flat_map(|t| t.iter_mut()) {
                    if KINDS.contains(&kind.get()) {
                        tables.extend(deps.as_table_like_mut());
                    }
                }
            }
        }
    }
    tables
}

/// A dependency's relative `path`, made absolute from `base` (the manifest's folder),
/// since the crate is built elsewhere.
fn absolute_path(dependency: &mut Value, base: &Path) -> Result<(), String> {
    let Some(table) = dependency.as_inline_table_mut() else { return Ok(()) };
    let Some(relative) = table.get("path").and_then(Value::as_str) else { return Ok(()) };
    let absolute = join_lexically(base, Path::new(relative));
    let absolute = absolute
        .to_str()
        .ok_or_else(|| format!("{} is not valid UTF-8, which a Cargo.toml needs", absolute.display()))?;
    table.insert("path", Value::from(absolute).decorated(" ", " "));
    Ok(())
}

/// `base/relative` with its `.` and `..` taken away, without asking the file system.
fn join_lexically(base: &Path, relative: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in base.join(relative).components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir if out.file_name().is_some() => {
                out.pop();
            }
            other => out.push(other),
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

    const WORKSPACE: &str = "[workspace.package]\nedition = \"2021\"\nlicense = \"MIT\"\n\n[workspace.dependencies]\ntch = \"=0.24.0\"\nclap = { version = \"4\", features = [\"derive\"] }\n";

    fn standalone(manifest: &str, workspace: &str, root: &str) -> Result<String, String> {
        standalone_manifest(manifest, workspace, Path::new(root), 7, "checked_step_07")
    }

    #[test]
    fn the_manifest_stands_alone() {
        let manifest = "# Generated by coursegen.\n[package]\nname = \"step_07\"\nedition.workspace = true\nlicense.workspace = true\n\n[dependencies]\nlabkit = { path = \"../../crates/labkit\" }\n# Direct: build.rs reads it.\ntch.workspace = true\nclap.workspace = true\n";
        let out = standalone(manifest, WORKSPACE, "/repo").unwrap();
        assert_eq!(
            out,
            "# Generated by coursegen.\n[package]\nname = \"checked_step_07\"\nedition = \"2021\"\n\n[dependencies]\nlabkit = { path = \"/repo/crates/labkit\" }\n# Direct: build.rs reads it.\ntch = \"=0.24.0\"\nclap = { version = \"4\", features = [\"derive\"] }\n\n[workspace]\n"
        );
    }

    #[test]
    fn the_workspaces_profiles_come_along() {
        let workspace = "[workspace.package]\nedition = \"2021\"\n\n# why\n[profile.dev]\ndebug = \"line-tables-only\"\n\n[profile.dev.package.labkit]\nopt-level = 2\n[workspace.dependencies]\ntch = \"=0.24.0\"\n";
        let out = standalone("[package]\nname = \"step_07\"\n", workspace, "/r").unwrap();
        assert_eq!(
            out,
            "[package]\nname = \"checked_step_07\"\n\n[workspace]\n\n# why\n[profile.dev]\ndebug = \"line-tables-only\"\n\n[profile.dev.package.labkit]\nopt-level = 2\n"
        );
    }

    #[test]
    fn a_key_is_changed_only_in_its_own_table() {
        // `name`, `edition` and `path` also appear in other tables, before the ones meant.
        let workspace = "[workspace.metadata.course]\nedition = \"not this\"\ntch = \"not this\"\n\n[workspace.package]\nedition = \"2021\"\n\n[workspace.dependencies]\ntch = \"=0.24.0\"\n";
        let manifest = "[package.metadata.lab]\nname = \"kept\"\npath = \"../../crates/kept\"\n\n[package]\nname = \"step_07\"\nedition.workspace = true\n\n[[bin]]\nname = \"step_07\"\npath = \"src/main.rs\"\n\n[dependencies]\ntch.workspace = true\n";
        let out = standalone(manifest, workspace, "/repo").unwrap();
        let doc = out.parse::<DocumentMut>().unwrap();
        assert_eq!(doc["package"]["name"].as_str(), Some("checked_step_07"), "{out}");
        assert_eq!(doc["package"]["edition"].as_str(), Some("2021"), "{out}");
        assert_eq!(doc["package"]["metadata"]["lab"]["name"].as_str(), Some("kept"), "{out}");
        assert_eq!(doc["package"]["metadata"]["lab"]["path"].as_str(), Some("../../crates/kept"), "{out}");
        // The binary is named for the package (what the checker runs); its path stays.
        assert_eq!(doc["bin"][0]["name"].as_str(), Some("checked_step_07"), "{out}");
        assert_eq!(doc["bin"][0]["path"].as_str(), Some("src/main.rs"), "{out}");
        assert_eq!(doc["dependencies"]["tch"].as_str(), Some("=0.24.0"), "{out}");
    }

    #[test]
    fn paths_are_escaped_as_toml_strings() {
        let root = r#"/home/a "quoted" \back\slashed and spaced"#;
        let manifest = "[package]\nname = \"step_07\"\n\n[dependencies]\nlabkit = { path = \"../../crates/labkit\" }\n\n[build-dependencies]\nhelper = { path = \"../helper\", version = \"1\" }\n";
        let out = standalone(manifest, WORKSPACE, root).unwrap();
        let doc = out.parse::<DocumentMut>().expect("the manifest stays valid TOML");
        assert_eq!(doc["dependencies"]["labkit"]["path"].as_str(), Some(&*format!("{root}/crates/labkit")));
        let helper = format!("{root}/steps/helper");
        assert_eq!(doc["build-dependencies"]["helper"]["path"].as_str(), Some(&*helper));
        assert_eq!(doc["build-dependencies"]["helper"]["version"].as_str(), Some("1"));
    }

    #[test]
    fn an_inherited_dependency_keeps_what_the_crate_adds() {
        let manifest = "[package]\nname = \"step_07\"\n\n[target.'cfg(unix)'.dev-dependencies]\nclap = { workspace = true, features = [\"env\"], optional = true }\nlocal = { path = \"../local\" }\n";
        let out = standalone(manifest, WORKSPACE, "/repo").unwrap();
        let doc = out.parse::<DocumentMut>().unwrap();
        let clap = &doc["target"]["cfg(unix)"]["dev-dependencies"]["clap"];
        assert_eq!(clap["version"].as_str(), Some("4"), "{out}");
        let features: Vec<_> =
            clap["features"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
        assert_eq!(features, ["derive", "env"], "{out}");
        assert_eq!(clap["optional"].as_bool(), Some(true), "{out}");
        assert!(clap.get("workspace").is_none(), "{out}");
        let local = &doc["target"]["cfg(unix)"]["dev-dependencies"]["local"];
        assert_eq!(local["path"].as_str(), Some("/repo/steps/local"), "{out}");
    }

    #[test]
    fn an_undefined_inherited_key_is_an_error() {
        let err = standalone("[package]\nname = \"s\"\n[dependencies]\nserde.workspace = true\n", "", "/r")
            .unwrap_err();
        assert!(err.contains("`serde`") && err.contains("[workspace.dependencies]"), "{err}");
    }

    #[test]
    fn a_manifest_that_is_not_toml_is_refused_saying_how_to_restore_it() {
        let err = standalone("[package\nname = \"step_07\"\n", WORKSPACE, "/repo").unwrap_err();
        assert!(err.starts_with("/repo/steps/step_07/Cargo.toml is not valid TOML"), "{err}");
        assert!(err.contains("line 1"), "{err}");
        assert!(err.contains("cargo checker reset step 7"), "{err}");
        let err = standalone("name = \"step_07\"\n", WORKSPACE, "/repo").unwrap_err();
        assert!(err.contains("has no [package] table"), "{err}");
        let err = standalone("[package]\nname = \"s\"\n", "[workspace", "/repo").unwrap_err();
        assert!(err.contains("the workspace's) is not valid TOML"), "{err}");
    }
}
