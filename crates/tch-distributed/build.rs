//! Compiles the C++ shim over libtorch's c10d (shim/tchd.cpp) and its SyncBatchNorm
//! (shim/sync_batch_norm.cpp), bf16 autocast (shim/amp.cpp) and FSDP's autograd and
//! storage pieces, whose backward node tensor parallelism's region operators share
//! (shim/fsdp.cpp), and the gradient hooks (shim/hooks.cpp).
//!
//! libtorch is found through torch-sys (`links = "tch"` gives us `DEP_TCH_LIBTORCH_LIB`),
//! so by its rules: `LIBTORCH`, or `LIBTORCH_USE_PYTORCH=1` for python's torch; the gloo
//! headers, which libtorch's ProcessGroupGloo.hpp includes, as `gloo_search` says. The
//! lookups themselves live in build/locate.rs, which tests/build_locate.rs tests.
//! With the `doc-only` feature (docs.rs) nothing is compiled or linked: the docs need
//! neither libtorch nor gloo.
//! ProcessGroupNCCL is compiled in whenever libtorch ships its CUDA libraries and the
//! CUDA/NCCL headers of the pip wheels are beside it, so machines without a GPU still
//! compile (and so check) the NCCL path.
use std::path::{Path, PathBuf};

#[path = "build/locate.rs"]
mod locate;

fn main() {
    println!("cargo:rerun-if-changed=build/locate.rs");
    println!("cargo:rustc-check-cfg=cfg(tchd_nccl)");
    if std::env::var_os("CARGO_FEATURE_DOC_ONLY").is_some() {
        // tch's doc-only feature skips torch-sys's libtorch lookup the same way.
        return;
    }
    println!("cargo:rerun-if-changed=shim");
    let listed: Vec<&str> = SHIM_SOURCES.iter().chain(&SHIM_HEADERS).chain(&[CUDA_ANCHOR]).copied().collect();
    for f in &listed {
        println!("cargo:rerun-if-changed=shim/{f}");
    }
    // A file added to shim/ but not to the lists would be neither compiled nor part of
    // the cache key: a stale archive linked without a word.
    for entry in std::fs::read_dir("shim").expect("tch-distributed's shim/ folder") {
        let name = entry.expect("a file of shim/").file_name().to_string_lossy().into_owned();
        assert!(
            listed.contains(&name.as_str()),
            "shim/{name} is in none of build.rs's lists: add it to SHIM_SOURCES (compiled) or SHIM_HEADERS"
        );
    }

    let reported = locate::libtorch_lib(std::env::var_os("DEP_TCH_LIBTORCH_LIB").as_deref())
        .unwrap_or_else(|message| stop(&message));
    // Resolve the `.libtorch` link: the CUDA headers sit beside the real torch directory.
    let lib = std::fs::canonicalize(&reported).unwrap_or(reported);
    let root = lib.parent().expect("libtorch lib dir has a parent").to_path_buf();
    let include = root.join("include");

    let mut build = cc::Build::new();
    line_tables_only(&mut build)
        .cpp(true)
        .pic(true)
        .warnings(false)
        .files(SHIM_SOURCES.map(|f| Path::new("shim").join(f)))
        .include("shim")
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        .flag("-std=c++20")
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        .define("USE_C10D_GLOO", None)
        .define("GLOG_USE_GLOG_EXPORT", None);
    let gloo = locate::gloo_include(&gloo_search()).unwrap_or_else(|message| stop(&message));
    if let Some(dir) = &gloo {
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
    compile_once(&mut build, "tchd", &gloo.unwrap_or_else(|| "/usr/include".into()));
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

/// The shim's C++ sources, compiled into one archive: with [`SHIM_HEADERS`], what
/// [`compile_once`]'s key reads and what reruns this script. The one list of them.
const SHIM_SOURCES: [&str; 6] =
    ["tchd.cpp", "ddp.cpp", "sync_batch_norm.cpp", "amp.cpp", "fsdp.cpp", "hooks.cpp"];
/// The headers the sources include.
const SHIM_HEADERS: [&str; 2] = ["tchd.h", "tchd_internal.h"];
/// The one-object archive of [`link_libtorch_cuda_everywhere`], compiled on its own.
const CUDA_ANCHOR: &str = "cuda_anchor.cpp";

/// Compiles `build` into OUT_DIR's `lib<name>.a`, or copies the archive an identical
/// compile made before, kept beside the target directory's builds
/// (`<target>/<profile>/tchd-shim-cache/<key>/`).
///
/// Why: cargo runs this script once per way the crate is built, and each run compiled
/// the same C++ again (tens of seconds of CPU each): `cargo clippy` (its driver wraps
/// the workspace's build scripts), `cargo build`/`cargo test`, and the checker's
/// standalone crates for handed-in code, which are another workspace. The key is
/// everything the archive depends on: the compiler and its version, every argument
/// (includes, defines, flags), the shim's sources, libtorch's version header and the
/// gloo headers' config; anything else new (a path, a flag) is a new key, so a stale
/// archive is never linked.
fn compile_once(build: &mut cc::Build, name: &str, gloo_dir: &Path) {
    use std::hash::{Hash, Hasher};
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let compiler = build.get_compiler();
    let mut key = std::collections::hash_map::DefaultHasher::new();
    compiler.path().hash(&mut key);
    compiler.args().hash(&mut key);
    let version = compiler.to_command().arg("--version").output().map(|o| o.stdout).unwrap_or_default();
    version.hash(&mut key);
    for file in SHIM_SOURCES.iter().chain(&SHIM_HEADERS) {
        std::fs::read(Path::new("shim").join(file)).unwrap_or_default().hash(&mut key);
    }
    // cc passes each include directory as `-I` and the directory, two arguments.
    let args = compiler.args();
    let versions = args
        .windows(2)
        .filter(|pair| pair[0] == "-I")
        .map(|pair| Path::new(&pair[1]).join("torch/version.h"))
        .chain([gloo_dir.join("gloo/config.h")]);
    for file in versions {
        std::fs::read(file).unwrap_or_default().hash(&mut key);
    }
    let archive = format!("lib{name}.a");
    // OUT_DIR is <target>/<profile>/build/<crate-hash>/out.
    let cache = out_dir
        .ancestors()
        .nth(3)
        .map(|profile| profile.join("tchd-shim-cache").join(format!("{:016x}", key.finish())).join(&archive));
    build.cargo_metadata(false);
    match &cache {
        Some(kept) if kept.is_file() => {
            let part = out_dir.join(format!("{archive}.part"));
            std::fs::copy(kept, &part)
                .and_then(|_| std::fs::rename(&part, out_dir.join(&archive)))
                .unwrap_or_else(|e| stop(&format!("cannot copy {}: {e}", kept.display())));
        }
        _ => {
            build.compile(name);
            if let Some(kept) = &cache {
                // Kept whole or not at all: another build may read it at any moment.
                let part = kept.with_extension(format!("part{}", std::process::id()));
                let _ = std::fs::create_dir_all(kept.parent().expect("a key directory"))
                    .and_then(|_| std::fs::copy(out_dir.join(&archive), &part))
                    .and_then(|_| std::fs::rename(&part, kept));
            }
        }
    }
    println!("cargo:rustc-link-search=native={}", out_dir.display());
    println!("cargo:rustc-link-lib=static={name}");
    println!("cargo:rustc-link-lib=stdc++");
}

/// Where this build looks for the gloo headers (`gloo/algorithm.h`), in this order:
/// `DDP_LAB_GLOO_INCLUDE` (refused when it holds none), the link `.gloo-include` in the
/// ddp-lab workspace root that scripts/setup.sh makes, /usr/include and
/// /usr/local/include, then the cache that scripts/setup.sh unpacks them into without
/// root (found also by a build outside the workspace, e.g. of the published crate).
/// Anything else stops the build with the ways to get them.
///
/// Deliberately no `rerun-if-env-changed`: where the headers are does not change what
/// is built, and the checker's build sandbox sees neither the variable nor the
/// link's target, so it must reuse this build instead of running the script again.
fn gloo_search() -> locate::GlooSearch {
    let manifest =
        PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    locate::GlooSearch {
        explicit: std::env::var_os("DDP_LAB_GLOO_INCLUDE"),
        workspace_link: Some(manifest.join("../../.gloo-include")),
        system: vec!["/usr/include".into(), "/usr/local/include".into()],
        setup_cache: locate::setup_cache(|name| std::env::var_os(name)),
    }
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
        .file(Path::new("shim").join(CUDA_ANCHOR))
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
