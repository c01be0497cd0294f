//! The crate's public API, held against `public-api.txt` and its version: a change to
//! the API must come with the version SemVer asks for (cargo's rules: for `0.y.z` a
//! breaking change raises `y`, an addition at least `z`), a CHANGELOG section for that
//! version, and a new `public-api.txt` (`DDP_LAB_UPDATE_PUBLIC_API=1 cargo test -p
//! tch-distributed --test public_api` writes it once the version is right). While the
//! CHANGELOG heading of the version says `(unreleased)`, changes are measured from the
//! last release it names.
//!
//! The API is read from rustdoc's JSON (`--output-format json`, unstable: enabled with
//! RUSTC_BOOTSTRAP=1 as cargo-semver-checks does) of the `doc-only` build, and written
//! a line per item under the path a user names it by (a re-export's, not the private
//! module's): every public function with its signature, type, field, variant, constant,
//! trait and its items, method, and trait implemented (auto traits included: a type
//! that stops being `Send` breaks its users). A line removed or changed is a breaking
//! change; a line added is an addition.
use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

const SNAPSHOT: &str = "public-api.txt";
const UPDATE_ENV: &str = "DDP_LAB_UPDATE_PUBLIC_API";

/// Traits rustdoc lists that no stable program can name or bound on: the compiler's
/// own (`Freeze`, `UnsafeUnpin`) and derive(PartialEq)'s marker.
const NOT_API: &[&str] =
    &["core::marker::Freeze", "core::marker::UnsafeUnpin", "core::marker::StructuralPartialEq"];

#[test]
fn the_public_api_changes_only_with_the_version_semver_asks_for() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let json = rustdoc_json(crate_dir);
    let krate: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let format = krate["format_version"].as_u64().expect("format_version");
    let now = Api { version: env!("CARGO_PKG_VERSION").to_string(), format, lines: api_lines(&krate) };
    assert!(now.lines.iter().any(|l| l == "fn tch_distributed::all_reduce(tensor: &mut tch::wrappers::tensor::Tensor, op: pytorch_names::ReduceOp) -> tch_distributed::Result<()>"), "the API is read: {:#?}", now.lines);

    let path = crate_dir.join(SNAPSHOT);
    if !path.exists() && std::env::var_os(UPDATE_ENV).is_some() {
        // The first record: nothing to compare with.
        std::fs::write(&path, now.render()).unwrap();
    }
    let recorded = Api::parse(
        &std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} ({UPDATE_ENV}=1 writes the first record)", path.display())),
    );
    if recorded.format != format {
        // Another toolchain writes the JSON another way: the lines would differ in form,
        // not in what they say. Nothing to compare here.
        eprintln!(
            "SKIPPED: this rustdoc writes JSON format {format}, {SNAPSHOT} was made from format {} \
             (the workspace's toolchain); {UPDATE_ENV}=1 rewrites it",
            recorded.format
        );
        if std::env::var_os(UPDATE_ENV).is_some() {
            std::fs::write(&path, now.render()).unwrap();
        }
        return;
    }
    let diff = Diff::between(&recorded.lines, &now.lines);
    if diff.is_empty() {
        return;
    }
    let changelog = std::fs::read_to_string(crate_dir.join("CHANGELOG.md")).unwrap();
    let problems = diff.problems(&recorded.version, &now.version, &changelog);
    assert!(problems.is_empty(), "{}\n{}", diff.describe(), problems.join("\n"));
    if std::env::var_os(UPDATE_ENV).is_some() {
        std::fs::write(&path, now.render()).unwrap();
        eprintln!("wrote {} for version {}", path.display(), now.version);
    } else {
        panic!(
            "{}\nThe version ({}) and the CHANGELOG allow it: write the new {SNAPSHOT} with \
             `{UPDATE_ENV}=1 cargo test -p tch-distributed --test public_api`",
            diff.describe(),
            now.version
        );
    }
}

/// rustdoc's JSON of the crate, built as docs.rs builds it (`doc-only`: no libtorch, no
/// gloo headers), in a target directory of its own so that the workspace's builds are
/// not disturbed (and not package.rs's doc-only one either: RUSTC_BOOTSTRAP makes cargo
/// rebuild the dependencies there each time the two alternate).
fn rustdoc_json(crate_dir: &Path) -> PathBuf {
    let root = crate_dir.join("../..").canonicalize().unwrap();
    // This test is <target>/<profile>/deps/public_api-<hash>.
    let exe = std::env::current_exe().unwrap();
    let target = exe.ancestors().nth(3).unwrap().join("public-api");
    let mut cmd = child_process::cargo();
    cmd.current_dir(&root)
        .args(["rustdoc", "-q", "--offline", "-p", "tch-distributed", "--features", "doc-only", "--"])
        .args(["-Z", "unstable-options", "--output-format", "json"])
        .env("CARGO_TARGET_DIR", &target)
        .env("RUSTC_BOOTSTRAP", "1")
        .env("LIBTORCH", "/nonexistent/libtorch")
        .env("DDP_LAB_GLOO_INCLUDE", "/nonexistent/gloo");
    let out = child_process::output(cmd, Some(Duration::from_secs(900))).expect("cargo starts");
    assert!(out.success(), "cargo rustdoc --output-format json: {}\n{}", out.describe(), out.stderr);
    target.join("doc/tch_distributed.json")
}

/// The recorded API: `public-api.txt`'s header (the crate's version and rustdoc's JSON
/// format) and its lines.
#[derive(Debug, PartialEq)]
struct Api {
    version: String,
    format: u64,
    lines: Vec<String>,
}

impl Api {
    fn render(&self) -> String {
        let mut text = format!(
            "# The public API of tch-distributed {} (rustdoc JSON format {}), a line per item.\n\
             # Written by tests/public_api.rs ({UPDATE_ENV}=1); see its docs before editing.\n",
            self.version, self.format
        );
        for line in &self.lines {
            text.push_str(line);
            text.push('\n');
        }
        text
    }

    fn parse(text: &str) -> Api {
        let header = text.lines().next().unwrap_or_default();
        let version = header
            .split("tch-distributed ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("{SNAPSHOT}'s first line names the version: {header:?}"))
            .to_string();
        let format = header
            .split("format ")
            .nth(1)
            .and_then(|rest| rest.trim_end_matches(|c: char| !c.is_ascii_digit()).parse().ok())
            .unwrap_or_else(|| panic!("{SNAPSHOT}'s first line names the JSON format: {header:?}"));
        let lines =
            text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()).map(str::to_string).collect();
        Api { version, format, lines }
    }
}

/// What changed between two APIs: lines gone (or changed) and lines new.
#[derive(Debug)]
struct Diff {
    removed: Vec<String>,
    added: Vec<String>,
}

/// The change SemVer names for a diff.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Change {
    Addition,
    Breaking,
}

impl Diff {
    fn between(before: &[String], after: &[String]) -> Diff {
        let (b, a): (BTreeSet<&String>, BTreeSet<&String>) =
            (before.iter().collect(), after.iter().collect());
        Diff {
            removed: b.difference(&a).map(|s| s.to_string()).collect(),
            added: a.difference(&b).map(|s| s.to_string()).collect(),
        }
    }

    fn is_empty(&self) -> bool {
        self.removed.is_empty() && self.added.is_empty()
    }

    fn change(&self) -> Change {
        if self.removed.is_empty() {
            Change::Addition
        } else {
            Change::Breaking
        }
    }

    fn describe(&self) -> String {
        let mut text = String::from("The public API of tch-distributed changed:\n");
        for line in &self.removed {
            text += &format!("  - {line}\n");
        }
        for line in &self.added {
            text += &format!("  + {line}\n");
        }
        text
    }

    /// What must be done before the new API may be recorded: the version raised as far
    /// as the change asks, and a CHANGELOG section for it.
    ///
    /// A version whose CHANGELOG heading says `(unreleased)` (Keep a Changelog's
    /// convention) is still being written: a change recorded under it is measured
    /// against the last release the CHANGELOG names, not against the record of the
    /// same unreleased version, so 0.2.0 can gain functions before it is published
    /// without going to 0.2.1.
    fn problems(&self, recorded: &str, now: &str, changelog: &str) -> Vec<String> {
        let mut problems = Vec::new();
        let (Some(mut old), Some(new)) = (parse_version(recorded), parse_version(now)) else {
            return vec![format!("versions must be MAJOR.MINOR.PATCH: {recorded:?}, {now:?}")];
        };
        if recorded == now && unreleased(changelog, now) {
            match last_release(changelog, new) {
                Some(release) => old = release,
                // Never released: nothing a user builds on yet.
                None => return problems,
            }
        }
        let least = least_version(old, self.change());
        if new < least {
            let what = match self.change() {
                Change::Breaking => "a breaking change (a line removed or changed)",
                Change::Addition => "an addition",
            };
            problems.push(format!(
                "this is {what}: the version must be at least {}.{}.{} (Cargo.toml says {now}, {SNAPSHOT} was {recorded})",
                least.0, least.1, least.2
            ));
        }
        if !changelog.lines().any(|l| l.starts_with("## ") && l.contains(now)) {
            problems.push(format!("CHANGELOG.md has no section `## {now}` saying what changed"));
        }
        problems
    }
}

/// The CHANGELOG's version headings: `## 0.2.0` or `## 0.2.0 (unreleased)`, with
/// whether the heading says unreleased.
fn headings(changelog: &str) -> impl Iterator<Item = (String, bool)> + '_ {
    changelog.lines().filter_map(|l| {
        let rest = l.strip_prefix("## ")?;
        let version = rest.split_whitespace().next()?.trim_matches(|c| c == '[' || c == ']');
        Some((version.to_string(), rest.to_ascii_lowercase().contains("unreleased")))
    })
}

/// Whether the CHANGELOG marks `version` unreleased.
fn unreleased(changelog: &str, version: &str) -> bool {
    headings(changelog).any(|(v, unreleased)| v == version && unreleased)
}

/// The highest released version below `below` that the CHANGELOG names.
fn last_release(changelog: &str, below: (u64, u64, u64)) -> Option<(u64, u64, u64)> {
    headings(changelog)
        .filter(|(_, unreleased)| !unreleased)
        .filter_map(|(v, _)| parse_version(&v))
        .filter(|v| *v < below)
        .max()
}

fn parse_version(v: &str) -> Option<(u64, u64, u64)> {
    let mut parts = v.split('.').map(|p| p.parse::<u64>().ok());
    let version = (parts.next()??, parts.next()??, parts.next()??);
    parts.next().is_none().then_some(version)
}

/// The least version after `old` that cargo lets carry `change`: the leftmost non-zero
/// part raised for a breaking change (0.1.4 → 0.2.0, 1.3.0 → 2.0.0, 0.0.3 → 0.0.4), the
/// part after it for an addition (0.1.4 → 0.1.5, 1.3.0 → 1.4.0).
fn least_version(old: (u64, u64, u64), change: Change) -> (u64, u64, u64) {
    match (old, change) {
        ((0, 0, z), _) => (0, 0, z + 1),
        ((0, y, _), Change::Breaking) => (0, y + 1, 0),
        ((0, y, z), Change::Addition) => (0, y, z + 1),
        ((x, _, _), Change::Breaking) => (x + 1, 0, 0),
        ((x, y, _), Change::Addition) => (x, y + 1, 0),
    }
}

/// The API as lines, sorted: each public item under its public path.
fn api_lines(krate: &Value) -> Vec<String> {
    let api = Reader::new(krate);
    let mut lines: BTreeSet<String> = api.external.iter().cloned().collect();
    for (id, path) in &api.public {
        lines.extend(api.item_lines(id, path));
    }
    lines.into_iter().collect()
}

/// rustdoc's JSON, read: the items of the crate and the public path of each public one.
struct Reader<'a> {
    index: &'a serde_json::Map<String, Value>,
    paths: &'a serde_json::Map<String, Value>,
    /// Item id → the path a user names it by (the shortest, breadth first from the root).
    public: BTreeMap<String, String>,
    /// Another crate's items re-exported (`pub use pytorch_names::ReduceOp`), a line
    /// each: their members are that crate's API, which this JSON does not hold.
    external: Vec<String>,
}

impl<'a> Reader<'a> {
    fn new(krate: &'a Value) -> Reader<'a> {
        let index = krate["index"].as_object().expect("index");
        let paths = krate["paths"].as_object().expect("paths");
        let root = krate["root"].to_string();
        let mut public = BTreeMap::new();
        let mut external = Vec::new();
        let mut queue = VecDeque::from([(root.clone(), index[&root]["name"].as_str().unwrap().to_string())]);
        let mut seen = HashSet::new();
        while let Some((id, path)) = queue.pop_front() {
            if !seen.insert(id.clone()) {
                continue;
            }
            let Some(item) = index.get(&id) else { continue };
            for child in item["inner"]["module"]["items"].as_array().into_iter().flatten() {
                let child_item = &index[&child.to_string()];
                if child_item["visibility"] != "public" {
                    continue;
                }
                if let Some(used) = child_item["inner"].get("use") {
                    // A re-export: the item it names, under the re-export's name.
                    if let (Some(target), Some(name)) = (used["id"].as_u64(), used["name"].as_str()) {
                        if index.contains_key(&target.to_string()) && used["is_glob"] == false {
                            queue.push_back((target.to_string(), format!("{path}::{name}")));
                        } else if let Some(source) = paths.get(&target.to_string()) {
                            let from: Vec<&str> =
                                source["path"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
                            let kind = source["kind"].as_str().unwrap_or("item");
                            external.push(format!("use {path}::{name} = {} ({kind})", from.join("::")));
                        }
                    }
                    continue;
                }
                let name = child_item["name"].as_str().unwrap_or("_");
                queue.push_back((child.to_string(), format!("{path}::{name}")));
            }
            public.entry(id).or_insert(path);
        }
        Reader { index, paths, public, external }
    }

    fn item(&self, id: &Value) -> &'a Value {
        &self.index[&id.to_string()]
    }

    /// An item's lines: its own, then its members' (fields, variants, methods, traits).
    fn item_lines(&self, id: &str, path: &str) -> Vec<String> {
        let item = &self.index[id];
        let (kind, inner) = item["inner"].as_object().unwrap().iter().next().unwrap();
        let non_exhaustive = if item["attrs"].as_array().into_iter().flatten().any(|a| a == "non_exhaustive")
        {
            "#[non_exhaustive] "
        } else {
            ""
        };
        let mut lines = Vec::new();
        match kind.as_str() {
            "module" => lines.push(format!("mod {path}")),
            "function" => lines.push(self.function("fn", path, inner)),
            "constant" => lines.push(format!("const {path}: {}", self.ty(&inner["type"]))),
            "static" => lines.push(format!("static {path}: {}", self.ty(&inner["type"]))),
            "type_alias" => lines.push(format!(
                "type {path}{} = {}",
                self.generics(&inner["generics"]),
                self.ty(&inner["type"])
            )),
            "struct" => {
                let generics = self.generics(&inner["generics"]);
                let shape = &inner["kind"];
                let fields: Vec<&Value> = if shape.get("plain").is_some() {
                    shape["plain"]["fields"].as_array().unwrap().iter().collect()
                } else if let Some(tuple) = shape.get("tuple") {
                    tuple.as_array().unwrap().iter().collect()
                } else {
                    Vec::new()
                };
                let stripped =
                    shape["plain"]["has_stripped_fields"] == true || fields.iter().any(|f| f.is_null());
                let form = if shape.get("tuple").is_some() {
                    "(..)"
                } else if shape == "unit" {
                    ";"
                } else {
                    "{..}"
                };
                let private = if stripped { " (private fields)" } else { "" };
                lines.push(format!("{non_exhaustive}struct {path}{generics}{form}{private}"));
                for (i, field) in fields.iter().enumerate().filter(|(_, f)| !f.is_null()) {
                    let field = self.item(field);
                    let name = field["name"].as_str().map_or_else(|| i.to_string(), str::to_string);
                    lines.push(format!("field {path}.{name}: {}", self.ty(&field["inner"]["struct_field"])));
                }
                lines.extend(self.impl_lines(path, &inner["impls"]));
            }
            "enum" => {
                let private = if inner["has_stripped_variants"] == true { " (private variants)" } else { "" };
                lines.push(format!(
                    "{non_exhaustive}enum {path}{}{private}",
                    self.generics(&inner["generics"])
                ));
                for variant in inner["variants"].as_array().unwrap() {
                    let variant = self.item(variant);
                    lines.push(self.variant(path, variant));
                }
                lines.extend(self.impl_lines(path, &inner["impls"]));
            }
            "trait" => {
                let mut head = String::new();
                if inner["is_unsafe"] == true {
                    head += "unsafe ";
                }
                if inner["is_auto"] == true {
                    head += "auto ";
                }
                let bounds = self.bounds(&inner["bounds"]);
                let bounds = if bounds.is_empty() { bounds } else { format!(": {bounds}") };
                lines.push(format!("{head}trait {path}{}{bounds}", self.generics(&inner["generics"])));
                for member in inner["items"].as_array().unwrap() {
                    lines.push(self.assoc(path, self.item(member)));
                }
            }
            // A macro, a primitive's docs and the like: named, not read.
            other => lines.push(format!("{other} {path}")),
        }
        lines
    }

    fn variant(&self, path: &str, variant: &Value) -> String {
        let name = variant["name"].as_str().unwrap();
        let shape = &variant["inner"]["variant"]["kind"];
        let field_ty = |f: &Value| self.ty(&self.item(f)["inner"]["struct_field"]);
        if let Some(fields) = shape.get("tuple").and_then(Value::as_array) {
            let fields: Vec<String> =
                fields.iter().map(|f| if f.is_null() { "_".to_string() } else { field_ty(f) }).collect();
            format!("variant {path}::{name}({})", fields.join(", "))
        } else if let Some(plain) = shape.get("struct") {
            let fields: Vec<String> = plain["fields"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| format!("{}: {}", self.item(f)["name"].as_str().unwrap_or("_"), field_ty(f)))
                .collect();
            let more = if plain["has_stripped_fields"] == true { ", .." } else { "" };
            format!("variant {path}::{name} {{ {}{more} }}", fields.join(", "))
        } else {
            format!("variant {path}::{name}")
        }
    }

    /// A trait's member: a method, an associated type or constant.
    fn assoc(&self, path: &str, member: &Value) -> String {
        let name = member["name"].as_str().unwrap_or("_");
        let (kind, inner) = member["inner"].as_object().unwrap().iter().next().unwrap();
        match kind.as_str() {
            "function" => self.function("fn", &format!("{path}::{name}"), inner),
            "assoc_type" => {
                let bounds = self.bounds(&inner["bounds"]);
                let bounds = if bounds.is_empty() { bounds } else { format!(": {bounds}") };
                let default = inner["type"]
                    .as_object()
                    .map_or(String::new(), |_| format!(" = {}", self.ty(&inner["type"])));
                format!("type {path}::{name}{bounds}{default}")
            }
            "assoc_const" => format!("const {path}::{name}: {}", self.ty(&inner["type"])),
            other => format!("{other} {path}::{name}"),
        }
    }

    /// A type's impls: its public methods (inherent impls) and the traits it implements
    /// (auto traits included; blanket impls, which come from elsewhere, left out).
    fn impl_lines(&self, path: &str, impls: &Value) -> Vec<String> {
        let mut lines = Vec::new();
        for id in impls.as_array().into_iter().flatten() {
            let imp = &self.item(id)["inner"]["impl"];
            if !imp["blanket_impl"].is_null() {
                continue;
            }
            let generics = self.generics(&imp["generics"]);
            let for_ty = self.ty(&imp["for"]);
            if imp["trait"].is_null() {
                for member in imp["items"].as_array().unwrap() {
                    let member = self.item(member);
                    if member["visibility"] != "public" {
                        continue;
                    }
                    let name = member["name"].as_str().unwrap_or("_");
                    let (kind, inner) = member["inner"].as_object().unwrap().iter().next().unwrap();
                    lines.push(match kind.as_str() {
                        "function" => self.function("fn", &format!("{path}::{name}"), inner),
                        "constant" | "assoc_const" => {
                            format!("const {path}::{name}: {}", self.ty(&inner["type"]))
                        }
                        other => format!("{other} {path}::{name}"),
                    });
                }
            } else if NOT_API.contains(&self.trait_path(&imp["trait"]).as_str()) {
                continue;
            } else {
                let negative = if imp["is_negative"] == true { "!" } else { "" };
                let unsafety = if imp["is_unsafe"] == true { "unsafe " } else { "" };
                let where_ = self.where_clause(&imp["generics"]);
                lines.push(format!(
                    "{unsafety}impl{generics} {negative}{} for {for_ty}{where_}",
                    self.trait_path(&imp["trait"])
                ));
            }
        }
        lines
    }

    fn function(&self, word: &str, path: &str, inner: &Value) -> String {
        let header = &inner["header"];
        let mut head = String::new();
        for (flag, text) in [("is_const", "const "), ("is_async", "async "), ("is_unsafe", "unsafe ")] {
            if header[flag] == true {
                head += text;
            }
        }
        if header["abi"] != "Rust" {
            head += &format!("extern {} ", compact(&header["abi"]));
        }
        format!(
            "{head}{word} {path}{}{}{}",
            self.generics(&inner["generics"]),
            self.signature(&inner["sig"]),
            self.where_clause(&inner["generics"])
        )
    }

    fn signature(&self, sig: &Value) -> String {
        let inputs: Vec<String> = sig["inputs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|pair| format!("{}: {}", pair[0].as_str().unwrap_or("_"), self.ty(&pair[1])))
            .collect();
        let output =
            if sig["output"].is_null() { String::new() } else { format!(" -> {}", self.ty(&sig["output"])) };
        format!("({}){output}", inputs.join(", "))
    }

    /// `<'a, T: Bound, const N: usize>`, the synthetic parameters of `impl Trait`
    /// arguments left out (the argument shows them).
    fn generics(&self, generics: &Value) -> String {
        let params: Vec<String> = generics["params"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["kind"]["type"]["is_synthetic"] != true)
            .map(|p| {
                let name = p["name"].as_str().unwrap_or("_");
                let kind = &p["kind"];
                if let Some(lifetime) = kind.get("lifetime") {
                    let outlives: Vec<&str> = lifetime["outlives"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .collect();
                    if outlives.is_empty() {
                        name.to_string()
                    } else {
                        format!("{name}: {}", outlives.join(" + "))
                    }
                } else if let Some(ty) = kind.get("type") {
                    let bounds = self.bounds(&ty["bounds"]);
                    let bounds = if bounds.is_empty() { bounds } else { format!(": {bounds}") };
                    let default = if ty["default"].is_null() {
                        String::new()
                    } else {
                        format!(" = {}", self.ty(&ty["default"]))
                    };
                    format!("{name}{bounds}{default}")
                } else if let Some(c) = kind.get("const") {
                    format!("const {name}: {}", self.ty(&c["type"]))
                } else {
                    compact(p)
                }
            })
            .collect();
        if params.is_empty() {
            String::new()
        } else {
            format!("<{}>", params.join(", "))
        }
    }

    fn where_clause(&self, generics: &Value) -> String {
        let predicates: Vec<String> = generics["where_predicates"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                if let Some(b) = p.get("bound_predicate") {
                    format!("{}: {}", self.ty(&b["type"]), self.bounds(&b["bounds"]))
                } else {
                    compact(p)
                }
            })
            .collect();
        if predicates.is_empty() {
            String::new()
        } else {
            format!(" where {}", predicates.join(", "))
        }
    }

    fn bounds(&self, bounds: &Value) -> String {
        let bounds: Vec<String> = bounds
            .as_array()
            .into_iter()
            .flatten()
            .map(|b| {
                if let Some(t) = b.get("trait_bound") {
                    let maybe = if t["modifier"] == "maybe" { "?" } else { "" };
                    format!("{maybe}{}", self.trait_path(&t["trait"]))
                } else if let Some(l) = b.get("outlives") {
                    l.as_str().unwrap_or("'_").to_string()
                } else {
                    compact(b)
                }
            })
            .collect();
        bounds.join(" + ")
    }

    /// A path to an item with its generic arguments: the public path of the crate's own
    /// items, the defining path of another crate's.
    fn trait_path(&self, path: &Value) -> String {
        let id = path["id"].to_string();
        let name = self.public.get(&id).cloned().unwrap_or_else(|| {
            self.paths
                .get(&id)
                .and_then(|p| p["path"].as_array())
                .map(|segments| segments.iter().filter_map(Value::as_str).collect::<Vec<_>>().join("::"))
                .unwrap_or_else(|| path["path"].as_str().unwrap_or("?").to_string())
        });
        format!("{name}{}", self.args(&path["args"]))
    }

    fn args(&self, args: &Value) -> String {
        if let Some(angle) = args.get("angle_bracketed") {
            let mut parts: Vec<String> = angle["args"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|a| {
                    if let Some(t) = a.get("type") {
                        self.ty(t)
                    } else if let Some(l) = a.get("lifetime") {
                        l.as_str().unwrap_or("'_").to_string()
                    } else {
                        compact(a)
                    }
                })
                .collect();
            for c in angle["constraints"].as_array().into_iter().flatten() {
                let name = c["name"].as_str().unwrap_or("_");
                if let Some(ty) = c["binding"].get("equality").and_then(|e| e.get("type")) {
                    parts.push(format!("{name} = {}", self.ty(ty)));
                } else if let Some(bounds) = c["binding"].get("constraint") {
                    parts.push(format!("{name}: {}", self.bounds(bounds)));
                } else {
                    parts.push(compact(c));
                }
            }
            if parts.is_empty() {
                String::new()
            } else {
                format!("<{}>", parts.join(", "))
            }
        } else if let Some(paren) = args.get("parenthesized") {
            let inputs: Vec<String> =
                paren["inputs"].as_array().into_iter().flatten().map(|t| self.ty(t)).collect();
            let output = if paren["output"].is_null() {
                String::new()
            } else {
                format!(" -> {}", self.ty(&paren["output"]))
            };
            format!("({}){output}", inputs.join(", "))
        } else if args.is_null() {
            String::new()
        } else {
            compact(args)
        }
    }

    fn ty(&self, ty: &Value) -> String {
        let Some((kind, inner)) = ty.as_object().and_then(|o| o.iter().next()) else {
            return match ty.as_str() {
                Some("infer") => "_".to_string(),
                _ => compact(ty),
            };
        };
        match kind.as_str() {
            "resolved_path" => self.trait_path(inner),
            "generic" | "primitive" => inner.as_str().unwrap_or("?").to_string(),
            "tuple" => {
                let parts: Vec<String> = inner.as_array().unwrap().iter().map(|t| self.ty(t)).collect();
                if parts.len() == 1 {
                    format!("({},)", parts[0])
                } else {
                    format!("({})", parts.join(", "))
                }
            }
            "slice" => format!("[{}]", self.ty(inner)),
            "array" => format!("[{}; {}]", self.ty(&inner["type"]), inner["len"].as_str().unwrap_or("?")),
            "borrowed_ref" => {
                let lifetime = inner["lifetime"].as_str().map_or(String::new(), |l| format!("{l} "));
                let mutable = if inner["is_mutable"] == true { "mut " } else { "" };
                format!("&{lifetime}{mutable}{}", self.ty(&inner["type"]))
            }
            "raw_pointer" => {
                let mutable = if inner["is_mutable"] == true { "mut" } else { "const" };
                format!("*{mutable} {}", self.ty(&inner["type"]))
            }
            "impl_trait" => format!("impl {}", self.bounds(inner)),
            "dyn_trait" => {
                let mut parts: Vec<String> = inner["traits"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| self.trait_path(&t["trait"]))
                    .collect();
                if let Some(l) = inner["lifetime"].as_str() {
                    parts.push(l.to_string());
                }
                format!("dyn {}", parts.join(" + "))
            }
            "function_pointer" => format!("fn{}", self.signature(&inner["sig"])),
            "qualified_path" => {
                let self_ty = self.ty(&inner["self_type"]);
                let name = inner["name"].as_str().unwrap_or("_");
                if inner["trait"].is_null() {
                    format!("{self_ty}::{name}")
                } else {
                    format!("<{self_ty} as {}>::{name}", self.trait_path(&inner["trait"]))
                }
            }
            _ => compact(ty),
        }
    }
}

/// A JSON value on one line without rustdoc's ids (which change from build to build):
/// what a form this reader does not know says, stably.
fn compact(value: &Value) -> String {
    fn strip(value: &Value) -> Value {
        match value {
            Value::Object(map) => Value::Object(
                map.iter().filter(|(k, _)| k.as_str() != "id").map(|(k, v)| (k.clone(), strip(v))).collect(),
            ),
            Value::Array(items) => Value::Array(items.iter().map(strip).collect()),
            other => other.clone(),
        }
    }
    strip(value).to_string()
}

#[test]
fn semver_asks_the_leftmost_non_zero_part_for_a_breaking_change() {
    assert_eq!(least_version((0, 1, 4), Change::Breaking), (0, 2, 0));
    assert_eq!(least_version((0, 1, 4), Change::Addition), (0, 1, 5));
    assert_eq!(least_version((1, 3, 2), Change::Breaking), (2, 0, 0));
    assert_eq!(least_version((1, 3, 2), Change::Addition), (1, 4, 0));
    assert_eq!(least_version((0, 0, 3), Change::Breaking), (0, 0, 4));
    assert_eq!(parse_version("0.12.3"), Some((0, 12, 3)));
    assert_eq!(parse_version("0.1"), None);
    assert_eq!(parse_version("0.1.0-rc.1"), None);
}

#[test]
fn a_change_needs_its_version_and_a_changelog_section() {
    let before = vec!["fn a::f()".to_string(), "fn a::g(x: u8)".to_string()];
    let changed = vec!["fn a::f()".to_string(), "fn a::g(x: u16)".to_string()];
    let added = vec!["fn a::f()".to_string(), "fn a::g(x: u8)".to_string(), "fn a::h()".to_string()];
    let log = "# Changelog\n\n## 0.2.0\n\n- g takes a u16\n\n## 0.1.1\n\n- h\n\n## 0.1.0\n";

    let breaking = Diff::between(&before, &changed);
    assert_eq!(breaking.change(), Change::Breaking);
    assert_eq!((breaking.removed.len(), breaking.added.len()), (1, 1));
    assert!(breaking.problems("0.1.0", "0.2.0", log).is_empty());
    let problems = breaking.problems("0.1.0", "0.1.1", log);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].contains("a breaking change") && problems[0].contains("at least 0.2.0"),
        "{problems:?}"
    );

    let addition = Diff::between(&before, &added);
    assert_eq!(addition.change(), Change::Addition);
    assert!(addition.problems("0.1.0", "0.1.1", log).is_empty());
    assert!(addition.problems("0.1.0", "0.1.0", log)[0].contains("at least 0.1.1"));
    let problems = addition.problems("0.1.0", "0.1.2", log);
    assert!(problems.len() == 1 && problems[0].contains("no section `## 0.1.2`"), "{problems:?}");

    assert!(Diff::between(&before, &before).is_empty());
}

#[test]
fn an_unreleased_version_is_measured_from_the_last_release() {
    let before = vec!["fn a::f()".to_string()];
    let added = vec!["fn a::f()".to_string(), "fn a::h()".to_string()];
    let removed = vec!["fn a::h()".to_string()];
    let addition = Diff::between(&before, &added);
    let breaking = Diff::between(&before, &removed);
    let open = "## 0.2.0 (unreleased)\n\n- h\n\n## 0.1.3\n\n## 0.1.0\n";
    // 0.2.0 recorded, not published: it gains and loses items without a new version.
    assert!(addition.problems("0.2.0", "0.2.0", open).is_empty());
    assert!(breaking.problems("0.2.0", "0.2.0", open).is_empty());
    // Unreleased 0.1.4 after 0.1.3: an addition fits it, a breaking change does not.
    let patch = "## 0.1.4 (Unreleased)\n\n## 0.1.3\n";
    assert!(addition.problems("0.1.4", "0.1.4", patch).is_empty());
    assert!(breaking.problems("0.1.4", "0.1.4", patch)[0].contains("at least 0.2.0"));
    // Published: the record's own version is the base again.
    let published = "## 0.2.0\n\n## 0.1.0\n";
    assert!(addition.problems("0.2.0", "0.2.0", published)[0].contains("at least 0.2.1"));
    // Never released at all: nothing to hold it to.
    assert!(breaking.problems("0.1.0", "0.1.0", "## 0.1.0 (unreleased)\n").is_empty());
}

#[test]
fn the_snapshot_reads_back_as_written() {
    let api = Api { version: "0.3.1".into(), format: 57, lines: vec!["mod x".into(), "fn x::f()".into()] };
    assert_eq!(Api::parse(&api.render()), api);
}
