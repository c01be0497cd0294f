//! The build script's lookups (build/locate.rs) over made-up directories and
//! variables: which libtorch and which gloo headers a build takes, in which order, and
//! what it says when one is missing. The build script compiles the same file.
#[path = "../build/locate.rs"]
mod locate;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use locate::{gloo_include, libtorch_lib, setup_cache, GlooSearch, GLOO_HEADER, LIBTORCH_MARKER};

/// A fresh, empty directory under cargo's scratch space for tests.
fn scratch(name: &str) -> PathBuf {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("build_locate-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A directory that holds `file` (its parents made).
fn holding(name: &str, file: &str) -> PathBuf {
    let dir = scratch(name);
    let path = dir.join(file);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, "").unwrap();
    dir
}

#[test]
fn libtorch_is_what_torch_sys_reported_when_it_holds_libtorch() {
    let lib = holding("libtorch-ok", LIBTORCH_MARKER);
    assert_eq!(libtorch_lib(Some(lib.as_os_str())).unwrap(), lib);
}

#[test]
fn no_libtorch_names_both_ways_to_get_it_and_the_gloo_headers() {
    for reported in [None, Some(OsString::new())] {
        let message = libtorch_lib(reported.as_deref()).unwrap_err();
        for named in [
            "DEP_TCH_LIBTORCH_LIB",
            "LIBTORCH=",
            "LIBTORCH_USE_PYTORCH=1",
            "DDP_LAB_GLOO_INCLUDE",
            "libgloo-dev",
        ] {
            assert!(message.contains(named), "{named} missing from: {message}");
        }
    }
    let empty = scratch("libtorch-empty");
    let message = libtorch_lib(Some(empty.as_os_str())).unwrap_err();
    assert!(message.contains(&empty.display().to_string()) && message.contains(LIBTORCH_MARKER), "{message}");
}

#[test]
fn gloo_headers_are_taken_in_setup_shs_order() {
    let explicit = holding("gloo-explicit", GLOO_HEADER);
    let system = holding("gloo-system", GLOO_HEADER);
    let cache = holding("gloo-cache", GLOO_HEADER);
    let link_dir = scratch("gloo-link");
    let link = link_dir.join(".gloo-include");
    std::os::unix::fs::symlink(holding("gloo-link-target", GLOO_HEADER), &link).unwrap();
    let everything = || GlooSearch {
        explicit: Some(explicit.clone().into()),
        workspace_link: Some(link.clone()),
        system: vec![scratch("gloo-system-empty"), system.clone()],
        setup_cache: Some(cache.clone()),
    };

    assert_eq!(gloo_include(&everything()).unwrap(), Some(explicit.clone()), "the variable comes first");
    let search = GlooSearch { explicit: Some(OsString::new()), ..everything() };
    assert_eq!(gloo_include(&search).unwrap(), Some(link.clone()), "an empty variable counts as unset");
    let search = GlooSearch { explicit: None, workspace_link: Some(link_dir.join("absent")), ..everything() };
    // The system's are found by the compiler itself: nothing to add.
    assert_eq!(gloo_include(&search).unwrap(), None, "an absent link is skipped");
    let search = GlooSearch { explicit: None, workspace_link: None, system: vec![], ..everything() };
    assert_eq!(gloo_include(&search).unwrap(), Some(cache), "the cache last");
}

#[test]
fn gloo_refuses_a_variable_or_link_that_leads_nowhere() {
    let empty = scratch("gloo-refused");
    let system = holding("gloo-refused-system", GLOO_HEADER);
    let search = GlooSearch {
        explicit: Some(empty.clone().into()),
        system: vec![system.clone()],
        ..Default::default()
    };
    let message = gloo_include(&search).unwrap_err();
    assert!(
        message.contains("DDP_LAB_GLOO_INCLUDE=") && message.contains(&empty.display().to_string()),
        "{message}"
    );

    let dangling = empty.join(".gloo-include");
    std::os::unix::fs::symlink(empty.join("gone"), &dangling).unwrap();
    let search = GlooSearch { workspace_link: Some(dangling), system: vec![system], ..Default::default() };
    let message = gloo_include(&search).unwrap_err();
    assert!(message.contains(".gloo-include") && message.contains("scripts/setup.sh"), "{message}");
}

#[test]
fn no_gloo_headers_names_every_way_to_get_them() {
    let search = GlooSearch {
        explicit: None,
        workspace_link: None,
        system: vec![scratch("gloo-none-system")],
        setup_cache: Some(scratch("gloo-none-cache")),
    };
    let message = gloo_include(&search).unwrap_err();
    for named in [GLOO_HEADER, "DDP_LAB_GLOO_INCLUDE=", "apt-get install libgloo-dev", "scripts/setup.sh"] {
        assert!(message.contains(named), "{named} missing from: {message}");
    }
}

#[test]
fn the_setup_cache_is_where_setup_sh_puts_it() {
    fn vars<'a>(set: &'a [(&str, &str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
        move |name| set.iter().find(|(n, _)| *n == name).map(|(_, v)| OsString::from(v))
    }
    let under = |dir: &str| Some(Path::new(dir).join("gloo-headers/usr/include"));
    let all = [("DDP_LAB_CACHE", "/c/lab"), ("XDG_CACHE_HOME", "/c/xdg"), ("HOME", "/home/u")];
    assert_eq!(setup_cache(vars(&all)), under("/c/lab"));
    assert_eq!(
        setup_cache(vars(&[("DDP_LAB_CACHE", ""), ("XDG_CACHE_HOME", "/c/xdg"), ("HOME", "/home/u")])),
        under("/c/xdg/ddp-lab")
    );
    assert_eq!(setup_cache(vars(&[("HOME", "/home/u")])), under("/home/u/.cache/ddp-lab"));
    assert_eq!(setup_cache(vars(&[])), None);
}
