//! Binaries and tests of this crate find libtorch without LD_LIBRARY_PATH; and the
//! course revision (a hash of the sources lab programs are made of) is computed here,
//! for `revision` to embed in every program.
#[allow(dead_code)]
#[path = "src/course_sources.rs"]
mod course_sources;

fn main() {
    if let Ok(lib) = std::env::var("DEP_TCH_DISTRIBUTED_LIBTORCH_LIB") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    }
    let manifest = std::path::PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let root = manifest.join("..").join("..");
    let revision = course_sources::revision_of(&root)
        .unwrap_or_else(|e| panic!("cannot read the course's sources under {}: {e}", root.display()));
    println!("cargo:rustc-env=DDP_LAB_COURSE_REVISION={revision}");
    for rel in course_sources::PATHS {
        println!("cargo:rerun-if-changed={}", root.join(rel).display());
    }
}
