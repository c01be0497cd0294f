//! A crate's module graph, read from its sources, and the cycles in it: its test
//! (`tests/workspace.rs`) fails when the modules of any crate of the workspace depend
//! on one another in a cycle, so that each module can be read, and changed, knowing
//! only the modules below it.
//!
//! The nodes are the crate root's top-level modules (`mod x;` in `lib.rs` or
//! `main.rs`): `x.rs` together with everything under `x/`, so a directory module is
//! one node. A module depends on another when its files name it in a `crate::` path,
//! code and doc links alike (`use crate::x`, `crate::x::f()`, [`crate::x`],
//! `crate::{x, y}`); a path through one of the root's re-exports (`crate::train`)
//! counts as a dependency on the module that defines the item.
//!
//! ```
//! let dir = std::env::temp_dir().join(format!("module-graph-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! std::fs::write(dir.join("lib.rs"), "mod a;\nmod b;\npub use b::B;\n").unwrap();
//! std::fs::write(dir.join("a.rs"), "use crate::B;\n").unwrap();
//! std::fs::write(dir.join("b.rs"), "pub struct B;\nfn f() { crate::a::g() }\n").unwrap();
//! let graph = module_graph::Graph::of_crate(&dir.join("lib.rs"), module_graph::Links::Code).unwrap();
//! let cycles = graph.cycles();
//! assert_eq!(cycles.len(), 1);
//! assert_eq!(cycles[0].modules, ["a", "b"]);
//! assert_eq!(cycles[0].to_string(), "{a, b}: a -> b, b -> a");
//! std::fs::remove_dir_all(&dir).unwrap();
//! ```
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

/// The top-level modules of one crate and the modules each refers to.
#[derive(Debug, Default)]
pub struct Graph {
    /// Each module and the modules it depends on (never itself).
    pub edges: BTreeMap<String, BTreeSet<String>>,
    /// `crate::` paths whose first segment is neither a module, a re-export nor a name
    /// the root's own text holds: what the reading here did not understand.
    pub unresolved: Vec<String>,
}

/// What makes a reference from one module to another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    /// `crate::` paths in code: what the module needs to compile.
    Code,
    /// In code and in comments (doc links such as [`crate::x`]) alike: also what a
    /// reader is sent to.
    CodeAndDocs,
}

/// A set of modules that reach one another, with the references among them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cycle {
    /// In name order.
    pub modules: Vec<String>,
    /// `(from, to)` for every reference between two of the modules.
    pub edges: Vec<(String, String)>,
}

impl fmt::Display for Cycle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let edges: Vec<String> = self.edges.iter().map(|(from, to)| format!("{from} -> {to}")).collect();
        write!(f, "{{{}}}: {}", self.modules.join(", "), edges.join(", "))
    }
}

impl Graph {
    /// The graph of the crate whose root file is `root` (`src/lib.rs`, `src/main.rs`,
    /// `src/bin/x.rs`); its modules are looked for beside it, as rustc does.
    pub fn of_crate(root: &Path, links: Links) -> std::io::Result<Graph> {
        let root_text = std::fs::read_to_string(root)?;
        let dir = root.parent().unwrap_or(Path::new("."));
        let mut modules = BTreeMap::new();
        for (name, path) in declared_module_files(&root_text) {
            let text = match path {
                Some(file) => std::fs::read_to_string(dir.join(file))?,
                None => module_text(dir, &name)?,
            };
            let text = match links {
                Links::Code => without_comment_lines(&text),
                Links::CodeAndDocs => text,
            };
            modules.insert(name.clone(), text);
        }
        Ok(Graph::of_modules(&root_text, &modules))
    }

    /// The graph of modules given by name with the text of their files, and the root's
    /// text (for its re-exports and its own items).
    pub fn of_modules(root_text: &str, modules: &BTreeMap<String, String>) -> Graph {
        let items = reexports(root_text);
        let mut graph = Graph::default();
        for (name, text) in modules {
            let mut deps = BTreeSet::new();
            for first in crate_paths(text) {
                let target = if modules.contains_key(&first) {
                    first
                } else if let Some(module) = items.get(&first) {
                    module.clone()
                } else {
                    // An item of the root itself (a constant, a test helper): the root
                    // is no module, so no edge.
                    if !has_word(root_text, &first) {
                        graph.unresolved.push(format!("{name}: crate::{first}"));
                    }
                    continue;
                };
                if &target != name {
                    deps.insert(target);
                }
            }
            graph.edges.insert(name.clone(), deps);
        }
        graph
    }

    /// Every cycle: the sets of more than one module that reach one another (each
    /// module is in at most one).
    pub fn cycles(&self) -> Vec<Cycle> {
        let mut found = Vec::new();
        let mut done = BTreeSet::new();
        for node in self.edges.keys() {
            if done.contains(node) {
                continue;
            }
            let modules: Vec<String> = self
                .edges
                .keys()
                .filter(|other| self.reaches(node, other) && self.reaches(other, node))
                .cloned()
                .collect();
            done.extend(modules.iter().cloned());
            if modules.len() < 2 {
                continue;
            }
            let edges = modules
                .iter()
                .flat_map(|from| {
                    self.edges[from]
                        .iter()
                        .filter(|to| modules.contains(to))
                        .map(|to| (from.clone(), to.clone()))
                })
                .collect();
            found.push(Cycle { modules, edges });
        }
        found
    }

    fn reaches(&self, from: &str, to: &str) -> bool {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_string()];
        while let Some(node) = stack.pop() {
            if node == to {
                return true;
            }
            if seen.insert(node.clone()) {
                stack.extend(self.edges.get(&node).into_iter().flatten().cloned());
            }
        }
        false
    }
}

/// The modules a crate root declares at its top level with `mod x;` (any visibility,
/// any attributes on the lines before); inline `mod x { ... }` blocks are the root's own.
pub fn declared_modules(root_text: &str) -> Vec<String> {
    declared_module_files(root_text).into_iter().map(|(name, _)| name).collect()
}

/// [`declared_modules`], each with the file a `#[path = "..."]` attribute on the line
/// before names (relative to the root's folder, as rustc reads it), if any: a file
/// shared with another target (an example compiled into a benchmark).
pub fn declared_module_files(root_text: &str) -> Vec<(String, Option<String>)> {
    let mut declared = Vec::new();
    let mut path = None;
    for line in root_text.lines() {
        let code = line.strip_prefix("pub ").or_else(|| line.strip_prefix("pub(crate) ")).unwrap_or(line);
        if let Some(name) = code.strip_prefix("mod ").and_then(|rest| rest.strip_suffix(';')) {
            if name.chars().all(|c| c.is_alphanumeric() || c == '_') {
                declared.push((name.to_string(), path.take()));
            }
            continue;
        }
        let attribute = line.trim().strip_prefix("#[path = \"").and_then(|rest| rest.strip_suffix("\"]"));
        match attribute {
            Some(file) => path = Some(file.to_string()),
            // Other attributes (`#[cfg(test)]`) may stand between; anything else ends it.
            None if line.trim_start().starts_with("#[") => {}
            None => path = None,
        }
    }
    declared
}

/// The text of module `name` of a crate root in `dir`: `name.rs` or `name/mod.rs`, and
/// every `.rs` file under `name/`, in path order.
fn module_text(dir: &Path, name: &str) -> std::io::Result<String> {
    let mut files = Vec::new();
    let file = dir.join(format!("{name}.rs"));
    if file.is_file() {
        files.push(file);
    }
    let sub = dir.join(name);
    if sub.is_dir() {
        let mut under = Vec::new();
        rust_files(&sub, &mut under)?;
        under.sort();
        files.extend(under);
    }
    if files.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!(
                "module `{name}`: neither {} nor {} exists",
                dir.join(format!("{name}.rs")).display(),
                sub.display()
            ),
        ));
    }
    let mut text = String::new();
    for file in files {
        text.push_str(&std::fs::read_to_string(file)?);
        text.push('\n');
    }
    Ok(text)
}

/// `text` without its comment lines (`//`, `///`, `//!`): what is left is code.
fn without_comment_lines(text: &str) -> String {
    text.lines().filter(|line| !line.trim_start().starts_with("//")).flat_map(|line| [line, "\n"]).collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Whether `text` holds `word` with no identifier character on either side.
fn has_word(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        !before.is_some_and(is_ident_char) && !after.is_some_and(is_ident_char)
    })
}

/// The first segment of every `crate::` path in `text`; a group `crate::{a, b::c}`
/// gives each of its members' first segments.
pub fn crate_paths(text: &str) -> Vec<String> {
    let ident = |s: &str| -> String { s.chars().take_while(|c| is_ident_char(*c)).collect() };
    let mut found = Vec::new();
    for (at, _) in text.match_indices("crate::") {
        // `$crate::` and paths such as `other_crate::` are not this crate's.
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| is_ident_char(c) || c == '$') {
            continue;
        }
        let rest = &text[at + "crate::".len()..];
        let Some(group) = rest.strip_prefix('{') else {
            let name = ident(rest);
            if !name.is_empty() {
                found.push(name);
            }
            continue;
        };
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
            .map_or(group.len(), |(i, _)| i);
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
    }
    found
}

/// A crate root's re-exports (`pub use`, `pub(crate) use`, and plain `use` of its own
/// modules): the name an item is reached by (after `as`) and the module it comes from.
pub fn reexports(root_text: &str) -> BTreeMap<String, String> {
    let mut items = BTreeMap::new();
    for line_start in root_text.lines().filter_map(|l| {
        ["pub use ", "pub(crate) use ", "use "].iter().find_map(|p| l.strip_prefix(p)).map(|_| l)
    }) {
        let at = root_text.find(line_start).expect("a line of the text");
        let statement = &root_text[at..];
        let statement = &statement[statement.find("use ").expect("a use line") + "use ".len()..];
        let Some(end) = statement.find(';') else { continue };
        let Some((module, tail)) = statement[..end].split_once("::") else { continue };
        let module = module.trim().trim_start_matches("crate::").to_string();
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
    }
    items
}

#[cfg(test)]
mod tests {
    use super::*;

    fn modules(list: &[(&str, &str)]) -> BTreeMap<String, String> {
        list.iter().map(|(name, text)| (name.to_string(), text.to_string())).collect()
    }

    #[test]
    fn the_parser_sees_what_the_graph_is_made_of() {
        let paths = crate_paths(
            "use crate::data::{A, B};\nuse crate::{probes, trace::{self, x}};\n/// [`crate::train`]\n\
             $crate::no; other_crate::no; crate::lab::f();",
        );
        assert_eq!(paths, ["data", "probes", "trace", "train", "lab"]);
        let items = reexports(
            "pub use checkpoint::{resume, save as save_checkpoint};\npub use data::{\n    download, fsutil::{A, B},\n};\npub use rng::Rng;\nuse cli::Cli;",
        );
        let expected: BTreeMap<String, String> = [
            ("resume", "checkpoint"),
            ("save_checkpoint", "checkpoint"),
            ("download", "data"),
            ("A", "data"),
            ("B", "data"),
            ("Rng", "rng"),
            ("Cli", "cli"),
        ]
        .into_iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        assert_eq!(items, expected);
        let declared = declared_modules(
            "//! doc\nmod a;\npub mod b;\npub(crate) mod c;\n#[cfg(test)]\nmod tests;\nmod inline {\n    mod nested;\n}\n",
        );
        assert_eq!(declared, ["a", "b", "c", "tests"]);
        // A `#[path]` attribute names the module's file (a benchmark compiling an example).
        let files = declared_module_files(
            "#[path = \"../../examples/shared.rs\"]\n#[allow(dead_code)]\nmod shared;\nmod own;\n#[path = \"x.rs\"]\nconst A: u8 = 1;\nmod after;\n",
        );
        assert_eq!(
            files,
            [
                ("shared".to_string(), Some("../../examples/shared.rs".to_string())),
                ("own".to_string(), None),
                ("after".to_string(), None),
            ]
        );
    }

    #[test]
    fn a_cycle_through_a_reexport_is_found_and_spelled_out() {
        let root = "mod group;\nmod store;\nmod rendezvous;\nmod error;\npub use group::validate_rank;\nconst TOP: u8 = 1;";
        let graph = Graph::of_modules(
            root,
            &modules(&[
                ("group", "use crate::store::Store;"),
                ("store", "use crate::rendezvous::is_loopback;\nfn f() -> u8 { crate::TOP }"),
                ("rendezvous", "use crate::validate_rank;"),
                ("error", "//! [`crate::group`] uses this"),
            ]),
        );
        assert!(graph.unresolved.is_empty(), "{:?}", graph.unresolved);
        let cycles = graph.cycles();
        assert_eq!(cycles.len(), 1, "{cycles:?}");
        assert_eq!(
            cycles[0].to_string(),
            "{group, rendezvous, store}: group -> store, rendezvous -> group, store -> rendezvous"
        );
        // error -> group, but nothing leads back: no cycle through error.
        assert!(graph.edges["error"].contains("group"));
    }

    #[test]
    fn doc_links_count_only_when_asked_for() {
        let dir = std::env::temp_dir().join(format!("module-graph-test-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("b")).unwrap();
        std::fs::write(dir.join("lib.rs"), "mod a;\nmod b;\n").unwrap();
        std::fs::write(dir.join("a.rs"), "use crate::b::X;\n").unwrap();
        // A directory module: b.rs and what lies under b/ are one node.
        std::fs::write(dir.join("b.rs"), "mod inner;\n").unwrap();
        std::fs::write(dir.join("b/inner.rs"), "/// Made by [`crate::a`].\npub struct X;\n").unwrap();
        let code = Graph::of_crate(&dir.join("lib.rs"), Links::Code).unwrap();
        let docs = Graph::of_crate(&dir.join("lib.rs"), Links::CodeAndDocs).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(code.cycles().is_empty(), "{code:?}");
        assert_eq!(docs.cycles()[0].to_string(), "{a, b}: a -> b, b -> a");
    }

    #[test]
    fn a_graph_without_cycles_has_none_and_unknown_paths_are_reported() {
        let graph = Graph::of_modules(
            "mod a;\nmod b;",
            &modules(&[("a", "use crate::b;"), ("b", "use crate::nowhere::X;")]),
        );
        assert!(graph.cycles().is_empty());
        assert_eq!(graph.unresolved, ["b: crate::nowhere"]);
    }
}
