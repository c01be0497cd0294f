//! The committed crates under steps/ and solutions/ must be exactly what coursegen
//! renders from course/lab: edits belong in the master, not in the generated copies.
use std::path::Path;

#[test]
fn generated_crates_match_the_master() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let drift = lab_course::check_all(&root).unwrap_or_else(|e| panic!("cannot render the course: {e}"));
    if !drift.is_empty() {
        let list: Vec<String> = drift.iter().map(|d| d.to_string()).collect();
        panic!(
            "{} generated file(s) drifted from course/lab:\n{}\nrun `cargo run -p coursegen -- write`",
            drift.len(),
            list.join("\n")
        );
    }
}

/// The master is the finished lab as a crate of the workspace (course/lab/Cargo.toml),
/// so `cargo fmt --all -- --check` and `cargo clippy --workspace` check it as they
/// check the crates rendered from it.
#[test]
fn the_master_is_a_workspace_member_built_from_main_rs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let workspace: toml_edit::DocumentMut =
        std::fs::read_to_string(root.join("Cargo.toml")).unwrap().parse().expect("Cargo.toml is TOML");
    let members = workspace["workspace"]["members"].as_array().expect("workspace.members, a list");
    assert!(
        members.iter().any(|m| m.as_str() == Some("course/lab")),
        "course/lab is not a workspace member: {members}"
    );
    let manifest = std::fs::read_to_string(root.join("course/lab/Cargo.toml")).unwrap();
    assert!(manifest.contains("path = \"main.rs\""), "course/lab/Cargo.toml must build main.rs:\n{manifest}");
    assert!(
        manifest.contains("build = \"build.rs\""),
        "course/lab/Cargo.toml must use build.rs:\n{manifest}"
    );
}

/// Every step has its guide page and its two crates, each named in its manifest as
/// `Version::package_name` says: the names cargo, the guide and the checker use.
#[test]
fn every_step_has_its_page_and_its_crates_under_their_names() {
    use lab_course::{guide_page, Version, LAST_STEP};
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for step in 0..=LAST_STEP {
        assert!(root.join(guide_page(step)).is_file(), "no {}", guide_page(step).display());
        for version in [Version::Starter(step), Version::Solution(step)] {
            let manifest = root.join(version.crate_dir()).join("Cargo.toml");
            let text =
                std::fs::read_to_string(&manifest).unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
            let doc: toml_edit::DocumentMut = text.parse().unwrap();
            assert_eq!(
                doc["package"]["name"].as_str(),
                Some(version.package_name().as_str()),
                "{}",
                manifest.display()
            );
        }
    }
}
