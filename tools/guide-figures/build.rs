// guide-figures links tch-distributed, hence libtorch (libtorch_cuda.so included): its
// binaries and test binaries find it without LD_LIBRARY_PATH, as lab-program's do.
fn main() {
    if let Ok(lib) = std::env::var("DEP_TCH_DISTRIBUTED_LIBTORCH_LIB") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    }
}
