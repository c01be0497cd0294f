// Binaries and tests of this crate find libtorch without LD_LIBRARY_PATH.
fn main() {
    if let Ok(lib) = std::env::var("DEP_TCH_DISTRIBUTED_LIBTORCH_LIB") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    }
}
