//! Compiles the C++ shim over libtorch's c10d (shim/tchd.cpp) and its SyncBatchNorm
//! (shim/sync_batch_norm.cpp), and bf16 autocast (shim/amp.cpp).
//!
//! libtorch is found through torch-sys (`links = "tch"` gives us `DEP_TCH_LIBTORCH_LIB`).
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
    build
        .cpp(true)
        .pic(true)
        .warnings(false)
        .file("shim/tchd.cpp")
        .file("shim/ddp.cpp")
        .file("shim/sync_batch_norm.cpp")
        .file("shim/amp.cpp")
        .include("shim")
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        .flag("-std=c++20")
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        .define("USE_C10D_GLOO", None)
        .define("GLOG_USE_GLOG_EXPORT", None);

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
    cc::Build::new()
        .cpp(true)
        .pic(true)
        .warnings(false)
        .file("shim/cuda_anchor.cpp")
        .flag("-std=c++20")
        .link_lib_modifier("+whole-archive")
        .link_lib_modifier("-bundle")
        .compile("tchd_cuda_anchor");
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
