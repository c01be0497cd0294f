//! labkit's modules depend on one another without a cycle, so each can be read (and
//! changed) knowing only the modules below it.
//!
//! A module's dependencies are every `crate::…` path in its files, code and doc links
//! alike (`use crate::x`, `crate::x::f()`, `[crate::x]`, `crate::{x, y}`); a path
//! through one of lib.rs's re-exports (`crate::train`) counts as a dependency on the
//! module that defines the item. A directory module (`data/`) is one node.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every top-level module with the text of its files: `x.rs`, or every `.rs` under `x/`.
fn modules() -> BTreeMap<String, String> {
    let mut modules = BTreeMap::new();
    for entry in std::fs::read_dir(src()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            let mut text = String::new();
            let mut files: Vec<PathBuf> = std::fs::read_dir(&path)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|e| e == "rs"))
                .collect();
            files.sort();
            for file in files {
                text.push_str(&std::fs::read_to_string(file).unwrap());
            }
            modules.insert(name, text);
        } else if path.extension().is_some_and(|e| e == "rs") && name != "lib" {
            modules.insert(name, std::fs::read_to_string(&path).unwrap());
        }
    }
    modules
}

/// The first segment of every `crate::` path in `text`; a group `crate::{a, b::c}`
/// gives each of its members' first segments.
fn crate_paths(text: &str) -> Vec<String> {
    let ident = |s: &str| -> String { s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect() };
    let mut found = Vec::new();
    for (at, _) in text.match_indices("crate::") {
        // `$crate::` and paths such as `other_crate::` are not this crate's.
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        let rest = &text[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let end = group
                .char_indices()
                .find(|(_, c)| {
                    depth += match c {
                        '{' => 1,
                        '}' => -1,
                        _ => 0,
                    };
                    depth == 0
                })
                .map(|(i, _)| i)
                .expect("a closed group");
            // Members at the group's own level only: `a::{b, c}` depends on `a`.
            let mut level = 0;
            let mut member = String::new();
            for c in group[..end].chars().chain([',']) {
                match c {
                    '{' => level += 1,
                    '}' => level -= 1,
                    ',' if level == 0 => {
                        let name = ident(member.trim());
                        if !name.is_empty() {
                            found.push(name);
                        }
                        member.clear();
                        continue;
                    }
                    _ => {}
                }
                if level == 0 {
                    member.push(c);
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                found.push(name);
            }
        }
    }
    found
}

/// lib.rs's re-exports: the name an item is reached by (after `as`) and its module.
fn reexports(lib: &str) -> BTreeMap<String, String> {
    let mut items = BTreeMap::new();
    let mut rest = lib;
    while let Some(at) = rest.find("pub use ") {
        let statement = &rest[at + "pub use ".len()..];
        let end = statement.find(';').expect("a use statement ends with ;");
        let (module, tail) = statement[..end].split_once("::").expect("pub use module::item");
        let module = module.trim().to_string();
        let tail = tail.trim();
        // Either one item or a group, possibly with nested groups (`fsutil::{A, B}`).
        let group = tail.strip_prefix('{').and_then(|t| t.strip_suffix('}')).unwrap_or(tail);
        let flat: String = group.chars().map(|c| if c == '{' || c == '}' { ',' } else { c }).collect();
        for member in flat.split(',') {
            let member = member.trim();
            let name = match member.split_once(" as ") {
                Some((_, alias)) => alias.trim(),
                None => member.rsplit("::").next().unwrap_or(member),
            };
            if !name.is_empty() && name != "self" {
                items.insert(name.to_string(), module.clone());
            }
        }
        rest = &statement[end..];
    }
    items
}

/// The module graph: each module and the modules it refers to.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let items = reexports(&lib);
    let modules = modules();
    let mut graph = BTreeMap::new();
    for (name, text) in &modules {
        let mut deps = BTreeSet::new();
        for first in crate_paths(text) {
            let target = if modules.contains_key(&first) {
                first
            } else if let Some(module) = items.get(&first) {
                module.clone()
            } else {
                // Defined in lib.rs itself (a test helper): the root is no module.
                assert!(
                    lib.contains(&format!("fn {first}")) || lib.contains(&format!("mod {first}")),
                    "{name} refers to crate::{first}, which is neither a module nor a re-export of lib.rs"
                );
                continue;
            };
            if &target != name {
                deps.insert(target);
            }
        }
        graph.insert(name.clone(), deps);
    }
    graph
}

/// Every cycle's modules: the strongly connected components of more than one module
/// (Tarjan's algorithm), each with one of its cycles spelled out.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    fn reaches(graph: &BTreeMap<String, BTreeSet<String>>, from: &str, to: &str) -> bool {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_string()];
        while let Some(node) = stack.pop() {
            if node == to {
                return true;
            }
            if seen.insert(node.clone()) {
                stack.extend(graph.get(&node).into_iter().flatten().cloned());
            }
        }
        false
    }
    let mut found = Vec::new();
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        if done.contains(node) {
            continue;
        }
        // The modules on a cycle through `node`: it reaches them and they reach it.
        let component: Vec<&String> =
            graph.keys().filter(|other| reaches(graph, node, other) && reaches(graph, other, node)).collect();
        done.extend(component.iter().map(|s| s.to_string()));
        if component.len() < 2 {
            continue;
        }
        let edges: Vec<String> = component
            .iter()
            .flat_map(|from| {
                graph[*from]
                    .iter()
                    .filter(|to| component.contains(to))
                    .map(move |to| format!("{from} -> {to}"))
            })
            .collect();
        found.push(format!(
            "{{{}}}: {}",
            component.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "),
            edges.join(", ")
        ));
    }
    found
}

#[test]
fn the_module_graph_has_no_cycle() {
    let graph = graph();
    let cycles = cycles(&graph);
    assert!(
        cycles.is_empty(),
        "labkit's modules depend on each other in a cycle; move what both need into a module \
         below them. Cycles (modules, and the references among them):\n{}",
        cycles.join("\n")
    );
}

#[test]
fn the_parser_sees_what_the_graph_is_made_of() {
    let paths = crate_paths(
        "use crate::data::{A, B};\nuse crate::{probes, trace::{self, x}};\n/// [`crate::train`]\n\
         $crate::no; other_crate::no; crate::lab::f();",
    );
    assert_eq!(paths, ["data", "probes", "trace", "train", "lab"]);
    let items = reexports(
        "pub use checkpoint::{resume, save as save_checkpoint};\npub use data::{\n    download, fsutil::{A, B},\n};\npub use rng::Rng;",
    );
    let expected: BTreeMap<String, String> = [
        ("resume", "checkpoint"),
        ("save_checkpoint", "checkpoint"),
        ("download", "data"),
        ("A", "data"),
        ("B", "data"),
        ("Rng", "rng"),
    ]
    .into_iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(items, expected);
    // The graph covers every module, the data directory as one.
    let graph = graph();
    assert!(graph.contains_key("data") && graph.contains_key("lab"), "{graph:?}");
    assert!(graph["dropout"].contains("rng"), "{graph:?}");
}
