//! Where the build finds libtorch and the gloo headers, as functions of the values
//! they are handed (variables, directories) rather than of the process environment:
//! build.rs passes the real ones, `tests/build_locate.rs` made-up ones, so every way
//! and every refusal is tested without running a build.
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

/// The header whose presence says "the gloo headers are here".
pub const GLOO_HEADER: &str = "gloo/algorithm.h";

/// The library whose presence says "this is libtorch's lib directory".
pub const LIBTORCH_MARKER: &str = "libtorch_cpu.so";

/// How to get libtorch, as torch-sys looks for it; part of every libtorch error.
const LIBTORCH_WAYS: &str = "torch-sys (a dependency of this crate) looks for libtorch, and this crate links the \
     one it finds. Either:\n  \
     1. `LIBTORCH=DIR`: a libtorch download, or the torch directory of a pip wheel \
     (`python -c 'import torch, os; print(os.path.dirname(torch.__file__))'`), with `LIBTORCH_CXX11_ABI=1`;\n  \
     2. `LIBTORCH_USE_PYTORCH=1`: the torch of the `python` on PATH.\n\
     Inside the ddp-lab workspace `bash scripts/setup.sh` does this for you.";

/// How to get the gloo headers; part of every gloo error.
const GLOO_WAYS: &str = "libtorch's ProcessGroupGloo.hpp includes the gloo headers, and neither libtorch \
     nor the torch wheel ships them. Any one of these gives them:\n  \
     1. `DDP_LAB_GLOO_INCLUDE=DIR`, a directory that holds gloo/algorithm.h;\n  \
     2. as root, `apt-get install libgloo-dev` (into /usr/include/gloo);\n  \
     3. the ddp-lab's `bash scripts/setup.sh`, no root needed: it downloads Debian's libgloo-dev into its \
     cache (`$DDP_LAB_CACHE`, else `$XDG_CACHE_HOME/ddp-lab`, else `~/.cache/ddp-lab`), where this build \
     finds it too.";

/// libtorch's lib directory, from what torch-sys reported (`DEP_TCH_LIBTORCH_LIB`).
///
/// Why through torch-sys: tch's bindings and this shim must link the same libtorch,
/// and torch-sys already resolves `LIBTORCH` and `LIBTORCH_USE_PYTORCH` (and its
/// download feature) in its own order; reading its answer cannot disagree with it.
pub fn libtorch_lib(reported: Option<&OsStr>) -> Result<PathBuf, String> {
    let Some(dir) = reported.filter(|d| !d.is_empty()) else {
        return Err(format!(
            "libtorch not found: torch-sys reported no lib directory (DEP_TCH_LIBTORCH_LIB). {LIBTORCH_WAYS}\n\
             The gloo headers are needed as well: {GLOO_WAYS}"
        ));
    };
    let dir = PathBuf::from(dir);
    if !dir.join(LIBTORCH_MARKER).is_file() {
        return Err(format!(
            "torch-sys reported {} as libtorch's lib directory, but it holds no {LIBTORCH_MARKER}. {LIBTORCH_WAYS}",
            dir.display()
        ));
    }
    Ok(dir)
}

/// Where to look for the gloo headers, in this order.
#[derive(Debug, Default)]
pub struct GlooSearch {
    /// `DDP_LAB_GLOO_INCLUDE`: used when it holds the headers, refused when not.
    pub explicit: Option<OsString>,
    /// The ddp-lab workspace's `.gloo-include` link (scripts/setup.sh makes it); a
    /// link that leads nowhere is refused, one that is absent is skipped.
    pub workspace_link: Option<PathBuf>,
    /// Directories the compiler searches on its own (/usr/include, /usr/local/include).
    pub system: Vec<PathBuf>,
    /// Where scripts/setup.sh unpacks libgloo-dev without root (see [`setup_cache`]).
    pub setup_cache: Option<PathBuf>,
}

/// The directory to add to the include path, `Ok(None)` when the headers are in one
/// of [`GlooSearch::system`] (the compiler finds them), or the error to stop with.
pub fn gloo_include(search: &GlooSearch) -> Result<Option<PathBuf>, String> {
    let holds = |dir: &Path| dir.join(GLOO_HEADER).is_file();
    if let Some(dir) = search.explicit.as_ref().filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        if holds(&dir) {
            return Ok(Some(dir));
        }
        return Err(format!(
            "DDP_LAB_GLOO_INCLUDE={} holds no {GLOO_HEADER}: name the directory that holds the gloo/ folder of \
             headers (for Debian's libgloo-dev, /usr/include), or unset it",
            dir.display()
        ));
    }
    if let Some(link) = search.workspace_link.as_ref().filter(|l| l.symlink_metadata().is_ok()) {
        if holds(link) {
            return Ok(Some(link.clone()));
        }
        return Err(format!(
            "the link {} (made by scripts/setup.sh) leads to no {GLOO_HEADER}: run `bash scripts/setup.sh` again",
            link.display()
        ));
    }
    // The system's before the cache, as scripts/setup.sh prefers them.
    if search.system.iter().any(|dir| holds(dir)) {
        return Ok(None);
    }
    if let Some(cache) = search.setup_cache.as_ref().filter(|c| holds(c)) {
        return Ok(Some(cache.clone()));
    }
    Err(format!("the gloo headers are missing ({GLOO_HEADER}). {GLOO_WAYS}"))
}

/// The include directory scripts/setup.sh unpacks libgloo-dev into, from the variables
/// it reads: `$DDP_LAB_CACHE`, else `$XDG_CACHE_HOME/ddp-lab`, else `$HOME/.cache/ddp-lab`,
/// then `gloo-headers/usr/include`.
pub fn setup_cache(var: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let set = |name: &str| var(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    let cache = set("DDP_LAB_CACHE")
        .or_else(|| set("XDG_CACHE_HOME").map(|d| d.join("ddp-lab")))
        .or_else(|| set("HOME").map(|d| d.join(".cache/ddp-lab")))?;
    Some(cache.join("gloo-headers/usr/include"))
}
