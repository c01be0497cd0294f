//! The workspace's layers: `tools/` holds the project's programs, and no crate outside
//! it (the checker, the libraries under `crates/`, the lab's programs) links one inside
//! it, so that the checker, a students' copy or a library never depends on a tool. What
//! they share is a library under `crates/` (the course itself is `crates/lab-course`).
use std::path::{Path, PathBuf};

use toml_edit::{DocumentMut, Item, TableLike};

/// The folder of the project's own programs.
const TOOLS: &str = "tools";

/// The workspace's members as folders: `[workspace] members`, `dir/*` globs expanded
/// to the folders under `dir` that hold a Cargo.toml.
fn members(root: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let manifest: DocumentMut = text.parse().expect("the workspace's Cargo.toml is TOML");
    let listed = manifest["workspace"]["members"].as_array().expect("[workspace] members, a list");
    let mut out = Vec::new();
    for member in listed.iter().map(|m| m.as_str().expect("a member is a string")) {
        match member.strip_suffix("/*") {
            Some(dir) => {
                let mut found: Vec<PathBuf> = std::fs::read_dir(root.join(dir))
                    .unwrap()
                    .map(|e| e.unwrap().path())
                    .filter(|p| p.join("Cargo.toml").is_file())
                    .collect();
                found.sort();
                out.extend(found);
            }
            None => out.push(root.join(member)),
        }
    }
    out
}

/// Every dependency table of a manifest: `[dependencies]`, `[dev-dependencies]`,
/// `[build-dependencies]`, and the same under each `[target.'cfg(..)']`.
fn dependency_tables(manifest: &DocumentMut) -> Vec<&dyn TableLike> {
    const KINDS: [&str; 3] = ["dependencies", "dev-dependencies", "build-dependencies"];
    let mut tables: Vec<&dyn TableLike> =
        KINDS.iter().filter_map(|k| manifest.get(k).and_then(Item::as_table_like)).collect();
    if let Some(targets) = manifest.get("target").and_then(Item::as_table_like) {
        for (_, target) in targets.iter() {
            tables.extend(KINDS.iter().filter_map(|k| target.get(k).and_then(Item::as_table_like)));
        }
    }
    tables
}

/// Each `member -> dependency` where a member outside `tools/` has a path dependency
/// inside it, paths relative to `root`.
fn links_into_tools(root: &Path) -> Vec<String> {
    let tools = root.join(TOOLS);
    let mut found = Vec::new();
    for member in members(root).into_iter().filter(|m| !m.starts_with(&tools)) {
        let text = std::fs::read_to_string(member.join("Cargo.toml")).unwrap();
        let manifest: DocumentMut =
            text.parse().unwrap_or_else(|e| panic!("{}/Cargo.toml: {e}", member.display()));
        for table in dependency_tables(&manifest) {
            for (name, dependency) in table.iter() {
                let Some(path) =
                    dependency.as_table_like().and_then(|d| d.get("path")).and_then(Item::as_str)
                else {
                    continue;
                };
                // Lexically: `..` of a member's own folder never passes through a link.
                let mut target = member.clone();
                for part in Path::new(path).components() {
                    match part {
                        std::path::Component::ParentDir => {
                            target.pop();
                        }
                        other => target.push(other),
                    }
                }
                if target.starts_with(&tools) {
                    let rel = |p: &Path| p.strip_prefix(root).unwrap_or(p).display().to_string();
                    found.push(format!("{} -> {name} ({})", rel(&member), rel(&target)));
                }
            }
        }
    }
    found
}

#[test]
fn no_crate_outside_tools_links_one_inside() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap();
    let members = members(&root);
    // The manifests were read (a misread would pass vacuously).
    for expected in ["checker", "crates/lab-course", "tools/coursegen", "steps/step_00"] {
        assert!(members.contains(&root.join(expected)), "{expected} not among {members:?}");
    }
    let found = links_into_tools(&root);
    assert!(
        found.is_empty(),
        "crates outside tools/ that depend on a tool; move what they share into a library \
         under crates/:\n{}",
        found.join("\n")
    );
}

#[test]
fn a_library_that_links_a_tool_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let write = |rel: &str, text: &str| {
        let path = dir.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write("Cargo.toml", "[workspace]\nmembers = [\"crates/*\", \"tools/gen\", \"checker\"]\n");
    write(
        "tools/gen/Cargo.toml",
        "[package]\nname = \"gen\"\n[dependencies]\nlib = { path = \"../../crates/lib\" }\n",
    );
    write(
        "crates/lib/Cargo.toml",
        "[package]\nname = \"lib\"\n[target.'cfg(unix)'.dev-dependencies]\ngen = { path = \"../../tools/gen\" }\n",
    );
    write("checker/Cargo.toml", "[package]\nname = \"checker\"\n[dependencies]\nlib = { path = \"../crates/lib\" }\ngen = { path = \"../tools/gen\" }\n");
    let found = links_into_tools(dir.path());
    assert_eq!(found, ["crates/lib -> gen (tools/gen)", "checker -> gen (tools/gen)"]);
}

/// The members of `tools/` with no program: tests of the workspace and of setup, which
/// nothing links.
const TEST_ONLY: &[&str] = &["tools/module-graph", "tools/setup-tests"];

#[test]
fn every_crate_in_tools_is_a_program_or_a_test_only_tool() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap();
    let tools: Vec<PathBuf> =
        members(&root).into_iter().filter(|m| m.starts_with(root.join(TOOLS))).collect();
    assert!(tools.contains(&root.join("tools/coursegen")), "{tools:?}");
    for member in &tools {
        let rel = member.strip_prefix(&root).unwrap().display().to_string();
        let program = member.join("src/main.rs").is_file() || member.join("src/bin").is_dir();
        assert!(
            program || TEST_ONLY.contains(&rel.as_str()),
            "{rel} is in tools/ but has no program (src/main.rs): a library belongs under crates/"
        );
    }
    for listed in TEST_ONLY {
        assert!(tools.contains(&root.join(listed)), "{listed} is no member of tools/ any more: drop it");
    }
}
