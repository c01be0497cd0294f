//! No crate of the workspace has a module cycle: every library and binary target that
//! `cargo metadata` lists (tests, benches and build scripts aside) is read with
//! [`module_graph::Graph`].
use std::path::PathBuf;
use std::process::Command;

use module_graph::{Graph, Links};

/// Crates whose doc links count as references too (see [`Links`]): labkit's modules
/// were held to that before this test covered the workspace.
const DOC_LINKS_COUNT: &[&str] = &["labkit"];

fn links(package: &str) -> Links {
    if DOC_LINKS_COUNT.contains(&package) {
        Links::CodeAndDocs
    } else {
        Links::Code
    }
}

/// Cycles being broken on another branch, as (package, modules in name order): each
/// goes when that branch is merged.
const BEING_BROKEN: &[(&str, &[&str])] = &[];

/// Every (package, crate root) of the workspace's lib and bin targets.
fn crate_roots() -> Vec<(String, PathBuf)> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--no-deps", "--format-version", "1", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    let metadata: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut roots = Vec::new();
    for package in metadata["packages"].as_array().unwrap() {
        for target in package["targets"].as_array().unwrap() {
            let kinds: Vec<&str> =
                target["kind"].as_array().unwrap().iter().filter_map(|k| k.as_str()).collect();
            if kinds.iter().any(|k| ["lib", "bin", "proc-macro"].contains(k)) {
                let name = package["name"].as_str().unwrap().to_string();
                roots.push((name, PathBuf::from(target["src_path"].as_str().unwrap())));
            }
        }
    }
    roots
}

#[test]
fn no_crate_of_the_workspace_has_a_module_cycle() {
    let roots = crate_roots();
    // The workspace's own crates are all there (a metadata misread would pass vacuously).
    for expected in ["checker", "labkit", "tch-distributed", "child-process", "coursegen"] {
        assert!(roots.iter().any(|(name, _)| name == expected), "{expected} not among {roots:?}");
    }
    let mut problems = Vec::new();
    for (package, root) in &roots {
        let graph =
            Graph::of_crate(root, links(package)).unwrap_or_else(|e| panic!("{}: {e}", root.display()));
        for unresolved in &graph.unresolved {
            problems.push(format!(
                "{}: {unresolved} is neither a module nor an item of the root",
                root.display()
            ));
        }
        for cycle in graph.cycles() {
            let allowed = BEING_BROKEN
                .iter()
                .any(|(p, modules)| p == package && cycle.modules.iter().eq(modules.iter()));
            if !allowed {
                problems.push(format!("{} ({package}): {cycle}", root.display()));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "modules that depend on each other in a cycle (modules, and the references among them); \
         move what both need into a module below them:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_allowed_cycles_still_exist() {
    // An entry whose cycle is gone (the branch was merged) must go too.
    let roots = crate_roots();
    for (package, modules) in BEING_BROKEN {
        let there = roots.iter().filter(|(name, _)| name == package).any(|(_, root)| {
            let graph = Graph::of_crate(root, links(package)).unwrap();
            graph.cycles().iter().any(|cycle| cycle.modules.iter().eq(modules.iter()))
        });
        assert!(there, "{package}: the cycle {modules:?} is gone; remove it from BEING_BROKEN");
    }
}
