//! The checker builds one step at a time (`cargo build -p step_NN`). That build must
//! reuse the dependencies `cargo build --workspace` compiled: with other features
//! (cargo unifies them over the packages of one command) it compiles and stores a
//! second copy of the whole tree, minutes of build and gigabytes of disk, which once
//! filled CI's disk. labkit's Cargo.toml asks for the features the demo turns on.
mod common;

use std::process::Command;

use serde_json::Value;

fn cargo() -> Command {
    // As a plain `cargo build` runs: the build `cargo test` made is reused, not redone.
    let mut cmd = child_process::cargo();
    cmd.current_dir(common::repo());
    cmd
}

#[test]
fn one_step_builds_on_the_workspaces_dependencies() {
    let mut workspace = cargo();
    workspace.args(["build", "-q", "--workspace", "--bins"]);
    assert!(
        child_process::status(workspace).expect("run cargo build").success(),
        "cargo build --workspace failed"
    );

    for package in ["solution_03", "step_11"] {
        let mut one = cargo();
        one.args(["build", "-p", package, "--message-format", "json"]);
        let out = child_process::output(one, None).expect("run cargo build -p");
        assert!(out.status.success(), "cargo build -p {package} failed:\n{}", out.stderr);
        // The workspace build made this very binary too: everything must be fresh.
        let rebuilt: Vec<String> = out
            .stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|m| m["reason"] == "compiler-artifact" && m["fresh"] == false)
            .filter_map(|m| m["package_id"].as_str().map(String::from))
            .collect();
        assert!(
            rebuilt.is_empty(),
            "cargo build -p {package} compiled again what the workspace build had compiled \
             (features that differ between the two commands):\n{}",
            rebuilt.join("\n")
        );
    }
}
