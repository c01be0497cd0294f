//! Every program of the lab sees the node's GPUs: each binary the workspace builds,
//! and each crate the checker builds, has libtorch_cuda.so among its ELF `NEEDED`
//! libraries whenever the libtorch in use ships it (the pip wheel does, on machines
//! without a GPU too). Without it, libtorch's CUDA hooks are never registered and
//! `tch::Cuda::device_count()` is 0 even on a GPU node. The link is made once, in
//! tch-distributed's build script (shim/cuda_anchor.cpp).
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

const CUDA_LIB: &str = "libtorch_cuda.so";

/// Whether libtorch here has its CUDA libraries; without torch at all the test can
/// only pass where it may skip.
fn libtorch_has_cuda() -> bool {
    let present = common::repo().join(".libtorch/lib").join(CUDA_LIB).exists();
    if !present {
        assert!(
            std::env::var_os("DDP_LAB_REQUIRE_TORCH").is_none(),
            ".libtorch/lib/{CUDA_LIB} is missing: run scripts/setup.sh (the pip libtorch has it)"
        );
        eprintln!("SKIPPED: this libtorch has no {CUDA_LIB}");
    }
    present
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| common::repo().join("target"))
}

fn cargo() -> Command {
    // As a plain `cargo build` runs: the build `cargo test` made is reused, not redone.
    let mut cmd = child_process::cargo();
    cmd.current_dir(common::repo());
    cmd
}

/// The names of every binary target of the workspace's packages.
fn workspace_binaries() -> Vec<String> {
    let out = cargo()
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .output()
        .expect("run cargo metadata");
    assert!(out.status.success(), "cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut bins = Vec::new();
    for package in meta["packages"].as_array().unwrap() {
        for target in package["targets"].as_array().unwrap() {
            if target["kind"].as_array().unwrap().iter().any(|k| k == "bin") {
                bins.push(target["name"].as_str().unwrap().to_string());
            }
        }
    }
    bins
}

#[test]
fn every_workspace_binary_links_libtorch_cuda() {
    if !libtorch_has_cuda() {
        return;
    }
    let mut build = cargo();
    build.args(["build", "-q", "--workspace", "--bins"]);
    let status = child_process::status(build).expect("run cargo build");
    assert!(status.success(), "cargo build --workspace --bins failed");
    let bins = workspace_binaries();
    // Every binary that loads libtorch (all but the course generator) must load its
    // CUDA part too.
    let mut torch_users = Vec::new();
    let mut missing = Vec::new();
    for bin in &bins {
        let libs = needed(&target_dir().join("debug").join(bin));
        if libs.iter().any(|l| l == "libc10.so") {
            torch_users.push(bin.as_str());
            if !libs.iter().any(|l| l == CUDA_LIB) {
                missing.push(bin.as_str());
            }
        }
    }
    for expected in ["step_00", "step_04", "solution_03", "solution_11", "checker", "demo", "lab"] {
        assert!(torch_users.contains(&expected), "{expected} does not load libtorch at all: {torch_users:?}");
    }
    assert!(
        missing.is_empty(),
        "these binaries do not load {CUDA_LIB}, so they would see no GPU on a GPU node: {missing:?}"
    );
}

#[test]
fn a_crate_the_checker_builds_links_libtorch_cuda() {
    if !libtorch_has_cuda() {
        return;
    }
    // Step 0's solution, handed in as a copy: the checker builds it in its own crate,
    // whose name its timings give (`building checked_step_00_...`). Found by name, not
    // by a fresh file time: a second run finds the build of the first one fresh.
    let copy = common::variant(0, "gpu-link", "use tch_distributed as dist;", "use tch_distributed as dist;");
    let verdict = common::checker_timed(&["verify", "step", "0", "--crate", copy.to_str().unwrap()]);
    assert_eq!(verdict.code, Some(0), "the checker failed step 0's solution:\n{}", verdict.output());
    let built: Vec<PathBuf> = verdict
        .stderr
        .lines()
        .filter_map(|l| l.split_once("  building ").map(|(_, package)| package.trim()))
        .filter(|package| package.starts_with("checked_step_00_"))
        .map(|package| target_dir().join("debug").join(package))
        .collect();
    assert_eq!(
        built.len(),
        1,
        "the checker named no checked_step_00_* crate it built:\n{}",
        verdict.output()
    );
    for bin in built {
        let libs = needed(&bin);
        assert!(libs.iter().any(|l| l == CUDA_LIB), "{} does not load {CUDA_LIB}: {libs:?}", bin.display());
    }
}

/// The `DT_NEEDED` entries of an ELF64 little-endian executable (what `readelf -d`
/// lists as NEEDED), read from its section headers: `.dynamic` and its string table.
fn needed(path: &Path) -> Vec<String> {
    let elf = std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    assert!(elf.starts_with(b"\x7fELF") && elf[4] == 2 && elf[5] == 1, "{} is not ELF64 LE", path.display());
    let u16_at = |o: usize| u16::from_le_bytes(elf[o..o + 2].try_into().unwrap()) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(elf[o..o + 4].try_into().unwrap()) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap()) as usize;
    let (shoff, shentsize, shnum) = (u64_at(0x28), u16_at(0x3a), u16_at(0x3c));
    // (type, link, offset, size) of section i
    let section = |i: usize| {
        let h = shoff + i * shentsize;
        (u32_at(h + 4), u32_at(h + 0x28), u64_at(h + 0x18), u64_at(h + 0x20))
    };
    const SHT_DYNAMIC: usize = 6;
    const DT_NEEDED: usize = 1;
    let Some((_, strtab, offset, size)) = (0..shnum).map(section).find(|s| s.0 == SHT_DYNAMIC) else {
        return Vec::new();
    };
    let strings = section(strtab).2;
    let mut libs = Vec::new();
    for entry in (offset..offset + size).step_by(16) {
        if u64_at(entry) == DT_NEEDED {
            let start = strings + u64_at(entry + 8);
            let end = start + elf[start..].iter().position(|&b| b == 0).unwrap();
            libs.push(String::from_utf8_lossy(&elf[start..end]).into_owned());
        }
    }
    libs
}
