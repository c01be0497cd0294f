// The tests link libtorch through the labkit dev-dependency, but a build script never
// sees a dev-dependency's `DEP_*` variables (labkit's way of setting the rpath), and
// the LD_LIBRARY_PATH of .cargo/config.toml does not reach them. So the test binaries get
// their rpath from LIBTORCH, which that config sets for build scripts.
fn main() {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    if let Some(root) = std::env::var_os("LIBTORCH") {
        let lib = std::path::Path::new(&root).join("lib");
        if let Ok(lib) = lib.canonicalize() {
            println!("cargo:rustc-link-arg-tests=-Wl,-rpath,{}", lib.display());
        }
    }
}
