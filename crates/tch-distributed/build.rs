//! Compiles the C++ shim over libtorch's c10d (shim/tchd.cpp) and its SyncBatchNorm
//! (shim/sync_batch_norm.cpp), bf16 autocast (shim/amp.cpp) and FSDP's autograd and
//! storage pieces (shim/fsdp.cpp).
//!
//! libtorch is found through torch-sys (`links = "tch"` gives us `DEP_TCH_LIBTORCH_LIB`);
//! the gloo headers, which libtorch's ProcessGroupGloo.hpp includes, as `gloo_include`
//! says.
//! ProcessGroupNCCL is compiled in whenever libtorch ships its CUDA libraries and the
//! CUDA/NCCL headers of the pip wheels are beside it, so machines without a GPU still
//! compile (and so check) the NCCL path.
use std::path::{Path, PathBuf};

fn main() {
    for f in [
        "tchd.cpp",
        "ddp.cpp",
        "sync_batch_norm.cpp",
        "amp.cpp",
        "fsdp.cpp",
        "cuda_anchor.cpp",
        "tchd.h",
        "tchd_internal.h",
    ] {
        println!("cargo:rerun-if-changed=shim/{f}");
    }
    println!("cargo:rustc-check-cfg=cfg(tchd_nccl)");

    let reported = PathBuf::from(std::env::var("DEP_TCH_LIBTORCH_LIB").expect(
        "torch-sys did not report libtorch's lib directory (DEP_TCH_LIBTORCH_LIB); run scripts/setup.sh",
    ));
    // Resolve the `.libtorch` link: the CUDA headers sit beside the real torch directory.
    let lib = std::fs::canonicalize(&reported).unwrap_or(reported);
    let root = lib.parent().expect("libtorch lib dir has a parent").to_path_buf();
    let include = root.join("include");

    let mut build = cc::Build::new();
    line_tables_only(&mut build)
        .cpp(true)
        .pic(true)
        .warnings(false)
        .file("shim/tchd.cpp")
        .file("shim/ddp.cpp")
        .file("shim/sync_batch_norm.cpp")
        .file("shim/amp.cpp")
        .file("shim/fsdp.cpp")
        .include("shim")
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        .flag("-std=c++20")
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        .define("USE_C10D_GLOO", None)
        .define("GLOG_USE_GLOG_EXPORT", None);
    if let Some(dir) = gloo_include() {
        build.include(dir);
    }

    let nccl_headers = nccl_headers(&root);
    let has_cuda_libs = lib.join("libtorch_cuda.so").exists();
    if has_cuda_libs {
        match &nccl_headers {
            Some(dirs) => {
                build
                    .define("USE_C10D_NCCL", None)
                    .define("USE_CUDA", None)
                    .define("TCHD_WITH_NCCL", None);
                for dir in dirs {
                    build.include(dir);
                }
                println!("cargo:rustc-cfg=tchd_nccl");
            }
            None => println!(
                "cargo:warning=libtorch has CUDA libraries but the CUDA/NCCL headers were not found next to it; building without NCCL (scripts/setup.sh installs them)"
            ),
        }
    }
    build.compile("tchd");
    if has_cuda_libs {
        link_libtorch_cuda_everywhere();
    }

    println!("cargo:rustc-link-search=native={}", lib.display());
    if has_cuda_libs {
        println!("cargo:rustc-link-lib=dylib=torch_cuda");
    }
    if has_cuda_libs && nccl_headers.is_some() {
        println!("cargo:rustc-link-lib=dylib=c10_cuda");
    }
    for l in ["torch", "torch_cpu", "c10"] {
        println!("cargo:rustc-link-lib=dylib={l}");
    }
    // Our own tests, examples and binaries find libtorch without LD_LIBRARY_PATH.
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    // Dependents read this as DEP_TCH_DISTRIBUTED_LIBTORCH_LIB to set their own rpath.
    println!("cargo:libtorch_lib={}", lib.display());
}

/// The directory that holds the gloo headers (`gloo/algorithm.h`), or None for the
/// system's, which the compiler finds on its own. In this order: `DDP_LAB_GLOO_INCLUDE`
/// (refused when it holds none), the link `.gloo-include` in the workspace root that
/// scripts/setup.sh makes, then /usr/include and /usr/local/include. Anything else
/// stops the build with the ways to get them.
///
/// Deliberately no `rerun-if-env-changed`: where the headers are does not change what
/// is built, and the checker's build sandbox sees neither the variable nor the
/// link's target, so it must reuse this build instead of running the script again.
fn gloo_include() -> Option<PathBuf> {
    const HEADER: &str = "gloo/algorithm.h";
    let holds = |dir: &Path| dir.join(HEADER).is_file();
    if let Some(dir) = std::env::var_os("DDP_LAB_GLOO_INCLUDE").filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        if holds(&dir) {
            return Some(dir);
        }
        stop(&format!(
            "DDP_LAB_GLOO_INCLUDE={} holds no {HEADER}: name the directory that holds the gloo/ folder of headers \
             (for Debian's libgloo-dev, /usr/include), or unset it",
            dir.display()
        ));
    }
    let manifest =
        PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let link = manifest.join("../../.gloo-include");
    if link.symlink_metadata().is_ok() {
        if holds(&link) {
            return Some(link);
        }
        stop(&format!(
            "the link {} (made by scripts/setup.sh) leads to no {HEADER}: run `bash scripts/setup.sh` again",
            link.display()
        ));
    }
    if ["/usr/include", "/usr/local/include"].iter().any(|dir| holds(Path::new(dir))) {
        return None;
    }
    stop(&format!(
        "the gloo headers are missing ({HEADER}; libtorch's ProcessGroupGloo.hpp includes them and the torch \
         wheel does not ship them). Any one of these gives them:\n  \
         1. `bash scripts/setup.sh`, no root needed: on Debian/Ubuntu it downloads libgloo-dev into its cache \
         and links .gloo-include;\n  \
         2. as root, `apt-get install libgloo-dev` (into /usr/include/gloo);\n  \
         3. `DDP_LAB_GLOO_INCLUDE=DIR`, a directory that holds {HEADER}."
    ))
}

/// Ends the build script with `message`, which cargo shows under the failed build.
fn stop(message: &str) -> ! {
    eprintln!("error: {message}");
    std::process::exit(1)
}

/// Makes every binary that depends on this crate load libtorch_cuda.so, so that it
/// sees the node's GPUs.
///
/// The linker's `--as-needed` drops a shared library that no linked object refers
/// to, and a binary that calls nothing of libtorch_cuda.so directly (step 0, the demo,
/// the checker) then runs without libtorch's CUDA hooks: `tch::Cuda::device_count()`
/// is 0 on a GPU node. `rustc-link-arg=-Wl,--no-as-needed` would only reach this
/// crate's own targets, and the `-as-needed` link modifier is unstable, so instead a
/// one-object archive whose constructor refers to a symbol of libtorch_cuda.so is
/// linked whole (`+whole-archive`) into every dependent binary. `-bundle` keeps it out
/// of the rlib (rustc refuses `+whole-archive` with bundling) and lets the final link
/// find it in OUT_DIR, whose search path propagates to dependents.
fn link_libtorch_cuda_everywhere() {
    line_tables_only(&mut cc::Build::new())
        .cpp(true)
        .pic(true)
        .warnings(false)
        .file("shim/cuda_anchor.cpp")
        .flag("-std=c++20")
        .link_lib_modifier("+whole-archive")
        .link_lib_modifier("-bundle")
        .compile("tchd_cuda_anchor");
}

/// The shim's debug info as the workspace's Rust code has it (`debug =
/// "line-tables-only"` in Cargo.toml): file and line in a backtrace, `-g1`. Cargo hands
/// build scripts `DEBUG=true` for that profile, which cc turns into a full `-g`: the
/// debug info of every libtorch template the shim instantiates, which doubled its
/// compile time (measured: ddp.cpp and tchd.cpp, 65.9 s of CPU with `-g`, 32.6 s with
/// `-g1`) in every from-scratch build, CI's two included.
fn line_tables_only(build: &mut cc::Build) -> &mut cc::Build {
    let wanted = std::env::var("DEBUG").is_ok_and(|d| !["", "0", "false", "none"].contains(&d.as_str()));
    build.debug(false);
    if wanted {
        build.flag("-g1").flag("-fno-omit-frame-pointer");
    }
    build
}

/// The CUDA runtime, CCCL and NCCL include directories of the pip wheels, if present.
fn nccl_headers(torch_root: &Path) -> Option<Vec<PathBuf>> {
    let site = torch_root.parent()?;
    let dirs = vec![
        site.join("nvidia/cu13/include"),
        site.join("nvidia/cu13/include/cccl"),
        site.join("nvidia/nccl/include"),
    ];
    let present = dirs[0].join("cuda_runtime_api.h").exists() && dirs[2].join("nccl.h").exists();
    present.then_some(dirs)
}
