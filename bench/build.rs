//! Lets the benchmark binaries find libtorch when started directly (not via `cargo run`),
//! and tells them which libtorch they link so the runner can compare it with Python's.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=DEP_TCH_DISTRIBUTED_LIBTORCH_LIB");
    // tch-distributed (`links = "tch_distributed"`) reports libtorch's lib directory.
    let lib = std::env::var("DEP_TCH_DISTRIBUTED_LIBTORCH_LIB")
        .expect("tch-distributed did not report libtorch's lib directory; run scripts/setup.sh");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    println!("cargo:rustc-env=DDP_BENCH_LIBTORCH_LIB={lib}");
}
