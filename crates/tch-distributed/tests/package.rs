//! The crate as published: `cargo package` makes its .crate (and those of child-process
//! and pytorch-names, which it depends on), and a scratch project outside the workspace, built against the same
//! libtorch, depends on the unpacked crates and runs one all_reduce on a 1-rank Gloo
//! group. This is what `cargo package`'s own verification would build, plus a run.
//!
//! The scratch build shares the workspace's target directory and profile settings, so
//! that tch, torch-sys and the shim's compiled archive are reused; what is compiled
//! anew is the packaged crates themselves.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// A build from scratch of the packaged crates takes minutes on 2 cores; this only
/// kills a build or run that hangs.
const LIMIT: Duration = Duration::from_secs(900);

/// The program the scratch project runs.
const MAIN: &str = r#"use std::time::Duration;
use tch_distributed as dist;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let init = dist::InitOptions {
        init_method: format!("tcp://127.0.0.1:{port}").parse()?,
        world_size: Some(1),
        rank: Some(0),
        timeout: Duration::from_secs(60),
    };
    dist::init_process_group(dist::Backend::Gloo, init)?;
    let mut t = tch::Tensor::from_slice(&[1.5f32, -2.0]);
    dist::all_reduce(&mut t, dist::ReduceOp::Sum)?;
    println!("backend {}, world size {}, all_reduce: {:?}", dist::get_backend()?, dist::get_world_size()?, Vec::<f32>::try_from(&t)?);
    dist::destroy_process_group()?;
    Ok(())
}
"#;

/// The scratch project's build script, as the README tells a user to write it: an rpath
/// to the libtorch tch-distributed linked (a dependency's link arguments do not reach
/// the dependent's binaries).
const BUILD_RS: &str = r#"fn main() {
    if let Ok(lib) = std::env::var("DEP_TCH_DISTRIBUTED_LIBTORCH_LIB") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    }
}
"#;

/// The crates packaged, each with the version its manifest gives.
const PACKAGED: [&str; 3] = ["child-process", "pytorch-names", "tch-distributed"];

/// `name-version`, as `cargo package` names a crate's archive and its folder.
fn packaged(name: &str) -> String {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(name).join("Cargo.toml");
    let manifest: toml_edit::DocumentMut = std::fs::read_to_string(&manifest).unwrap().parse().unwrap();
    format!("{name}-{}", manifest["package"]["version"].as_str().expect("a version of its own"))
}

fn run(cmd: Command, what: &str) -> String {
    let out = child_process::output(cmd, Some(LIMIT)).expect("it starts");
    assert!(out.success(), "{what}: {}\nstdout:\n{}\nstderr:\n{}", out.describe(), out.stdout, out.stderr);
    out.stdout
}

/// The workspace root and its target directory.
fn workspace() -> (PathBuf, PathBuf) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap();
    // This test is <target>/<profile>/deps/package-<hash>.
    let exe = std::env::current_exe().unwrap();
    let target = exe.ancestors().nth(3).unwrap().to_path_buf();
    (root, target)
}

/// The scratch project's manifest: the unpacked crates as path dependencies (the
/// published child-process and pytorch-names patched in for those tch-distributed
/// names), and the
/// workspace's profiles, without which every shared dependency would be built again.
fn manifest(unpacked: &Path, workspace_manifest: &str) -> String {
    let workspace: toml_edit::DocumentMut = workspace_manifest.parse().expect("the workspace's Cargo.toml");
    let path = |name: &str| toml_edit::value(unpacked.join(packaged(name)).display().to_string());
    let mut doc = toml_edit::DocumentMut::new();
    doc["package"]["name"] = toml_edit::value("uses-tch-distributed");
    doc["package"]["version"] = toml_edit::value("0.0.0");
    doc["package"]["edition"] = toml_edit::value("2021");
    doc["package"]["publish"] = toml_edit::value(false);
    doc["dependencies"]["tch"] =
        toml_edit::value(workspace["workspace"]["dependencies"]["tch"].as_str().unwrap());
    doc["dependencies"]["tch-distributed"]["path"] = path("tch-distributed");
    for dependency in ["child-process", "pytorch-names"] {
        doc["patch"]["crates-io"][dependency]["path"] = path(dependency);
    }
    doc["profile"] = workspace["profile"].clone();
    // As a workspace member has it: the build script's DEBUG, and so the shim's flags
    // and the key its compiled archive is kept under, are the workspace's.
    doc["profile"]["dev"]["package"]["tch-distributed"]["debug"] = toml_edit::value("line-tables-only");
    // Its own workspace, not a member of any above it.
    doc["workspace"] = toml_edit::table();
    doc.to_string()
}

#[test]
fn the_packaged_crate_builds_outside_the_workspace_and_all_reduces() {
    let (root, target) = workspace();
    // One scratch directory per workspace, the same every run: the packaged crate's
    // build (keyed by its path) is then reused rather than piling up in the target
    // directory, and two worktrees running this test at once do not collide.
    let mut key = fnv::FnvHasher::default();
    std::hash::Hash::hash(&root, &mut key);
    let scratch = std::env::temp_dir().join(format!("tchd-package-{:016x}", std::hash::Hasher::finish(&key)));
    let _ = std::fs::remove_dir_all(&scratch);
    let unpacked = scratch.join("unpacked");
    let user = scratch.join("user");
    std::fs::create_dir_all(&unpacked).unwrap();
    std::fs::create_dir_all(user.join("src")).unwrap();

    // The crates in one call: cargo resolves tch-distributed's child-process and
    // pytorch-names to those packaged beside it (until they are on crates.io,
    // packaging it alone cannot).
    let mut package = child_process::cargo();
    package.current_dir(&root).args(["package", "-q", "--offline", "--no-verify", "--allow-dirty"]);
    package
        .args(["-p", "child-process", "-p", "pytorch-names", "-p", "tch-distributed", "--target-dir"])
        .arg(scratch.join("package-target"));
    run(package, "cargo package");
    for name in PACKAGED {
        let mut untar = Command::new("tar");
        untar
            .arg("-xzf")
            .arg(scratch.join(format!("package-target/package/{}.crate", packaged(name))))
            .arg("-C")
            .arg(&unpacked);
        run(untar, "tar");
    }
    let crate_dir = unpacked.join(packaged("tch-distributed"));
    for shipped in
        ["build.rs", "build/locate.rs", "shim/tchd.cpp", "shim/tchd.h", "README.md", "CHANGELOG.md"]
    {
        assert!(crate_dir.join(shipped).is_file(), "the .crate lacks {shipped}");
    }
    assert!(!crate_dir.join("tests").exists(), "the workspace's tests are not shipped");

    let workspace_manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    std::fs::write(user.join("Cargo.toml"), manifest(&unpacked, &workspace_manifest)).unwrap();
    std::fs::write(user.join("src/main.rs"), MAIN).unwrap();
    std::fs::write(user.join("build.rs"), BUILD_RS).unwrap();
    // The workspace's versions of every dependency (and no network needed).
    std::fs::copy(root.join("Cargo.lock"), user.join("Cargo.lock")).unwrap();

    let mut build = child_process::cargo();
    // Found through the rpath alone, as it would be on a user's machine.
    build.env_remove("LD_LIBRARY_PATH");
    build.current_dir(&user).args(["run", "-q", "--offline"]).env("CARGO_TARGET_DIR", &target);
    // The libtorch of the workspace's builds: cargo set these for this test from the
    // workspace's .cargo/config.toml, which the scratch project outside it does not read.
    for var in ["LIBTORCH", "LIBTORCH_CXX11_ABI"] {
        let value = std::env::var_os(var)
            .unwrap_or_else(|| panic!("{var} is set by the workspace's .cargo/config.toml"));
        build.env(var, value);
    }
    let out = run(build, "the scratch project");
    assert!(out.contains("backend gloo, world size 1, all_reduce: [1.5, -2.0]"), "{out}");
    let _ = std::fs::remove_dir_all(&scratch);
}

/// docs.rs builds with `doc-only` and neither libtorch nor the gloo headers: the build
/// script must then compile and link nothing, and the docs must still build, without
/// a warning (a broken link included). Its own target directory: doc-only changes
/// tch's features, and the workspace's builds must not be disturbed.
#[test]
fn the_docs_build_without_libtorch_or_gloo() {
    let (root, target) = workspace();
    let doc_target = target.join("doc-only");
    let mut doc = child_process::cargo();
    doc.current_dir(&root).args([
        "doc",
        "-q",
        "--offline",
        "-p",
        "tch-distributed",
        "--no-deps",
        "--features",
        "doc-only",
    ]);
    doc.env("CARGO_TARGET_DIR", &doc_target).env("RUSTDOCFLAGS", "-D warnings");
    // Nowhere: a build that looked for either would fail.
    doc.env("LIBTORCH", "/nonexistent/libtorch").env("DDP_LAB_GLOO_INCLUDE", "/nonexistent/gloo");
    run(doc, "cargo doc --features doc-only");
    let index = doc_target.join("doc/tch_distributed/index.html");
    let html = std::fs::read_to_string(&index).unwrap_or_else(|e| panic!("{}: {e}", index.display()));
    // The README is the crate's front page.
    assert!(html.contains("A DDP training program"), "{}", index.display());
}
