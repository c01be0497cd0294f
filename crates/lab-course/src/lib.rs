//! The DDP lab as a course: its steps ([`STEPS`]), the two crates each step has
//! ([`Version`]: the student's starter and the solution, with their package names and
//! folders), the guide page of each step ([`guide_page`]), and the one annotated master
//! program both crates are rendered from. The checker, `coursegen` (the program that
//! writes the crates) and the guide's tools all read the course from here.
//!
//! `course/lab/main.rs` holds the finished lab, a program that compiles, with every
//! step's change wrapped in `//@ step N` blocks and the code it replaces commented out
//! (see [`markers`] for the language). From it come, for each step N,
//! `steps/step_NN` (the student's starter: steps before N done, step N marked `TODO`)
//! and `solutions/step_NN` (steps up to N done). Keeping one master means a fix lands
//! in all the step and solution crates at once, and `check_all` catches crates edited by hand.
mod copy_mark;
pub mod files;
mod format;
pub mod markers;
pub mod students_copy;

use std::fmt;
use std::path::{Path, PathBuf};

use toml_edit::{DocumentMut, Item, Value};

pub use files::{check_all, crate_files, write_all, Drift};

/// The title of each step, as the headers and package descriptions show it.
pub const STEPS: &[&str] = &[
    "import the distributed module",
    "the --num-nodes, --num-gpus and --node-id options",
    "world size and rendezvous address",
    "training moves into worker(local_rank, args)",
    "global rank and the process group",
    "download once per node, then a barrier",
    "DistributedSampler and set_epoch",
    "one device per rank, and the model wrapped in DDP",
    "throughput: a barrier and a reduce to rank 0",
    "validation metrics averaged over all ranks",
    "the program spawns its own ranks",
    "the quick evaluation",
    "checkpoint and resume",
    "Model and pipeline parallelism",
    "Fully sharded data parallel (FSDP)",
    "Tensor parallelism",
    "DDP x TP on a 2-D mesh",
];

/// The last step of NVIDIA's DLI lab, which this course ports: its solution is the
/// finished lab (the quick evaluation), and `grade all` grades the finished program on
/// steps 0 to this one. The steps after it go beyond the lab ("Beyond DDP") and are
/// graded each on its own (`grade step N`); `verify all` runs every step.
pub const LAB_LAST_STEP: u8 = 11;

/// The course's last step (beyond the DLI lab, whose last is [`LAB_LAST_STEP`] and whose
/// solution is the finished lab): the one number of steps that the checker, coursegen
/// and the guide's tools read (a step is added to [`STEPS`], nowhere else).
pub const LAST_STEP: u8 = STEPS.len() as u8 - 1;

/// Where the master program lives, relative to the repository root.
pub const MASTER: &str = "course/lab/main.rs";
/// The manifest template: its `[package]` `name` and `description` (`"{{name}}"`,
/// `"{{description}}"` there) are set per crate.
pub const MANIFEST_TEMPLATE: &str = "course/lab/Cargo.toml.in";
/// Copied verbatim into every crate.
pub const BUILD_SCRIPT: &str = "course/lab/build.rs";

/// One rendered program: a student's starter for a step, or the solution of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Version {
    /// The program after step N-1, with step N's work marked `TODO Step N`.
    Starter(u8),
    /// The program after step N.
    Solution(u8),
}

impl Version {
    /// Every version: the starters, then the solutions, each in step order.
    pub fn all() -> impl Iterator<Item = Version> {
        let steps = 0..STEPS.len() as u8;
        steps.clone().map(Version::Starter).chain(steps.map(Version::Solution))
    }

    pub fn step(self) -> u8 {
        match self {
            Version::Starter(n) | Version::Solution(n) => n,
        }
    }

    /// Relative to the repository root, e.g. `steps/step_07` or `solutions/step_07`.
    pub fn crate_dir(self) -> PathBuf {
        match self {
            Version::Starter(n) => PathBuf::from(format!("steps/step_{n:02}")),
            Version::Solution(n) => PathBuf::from(format!("solutions/step_{n:02}")),
        }
    }

    /// `step_07` or `solution_07`: distinct, since all the step and solution crates share one workspace.
    pub fn package_name(self) -> String {
        match self {
            Version::Starter(n) => format!("step_{n:02}"),
            Version::Solution(n) => format!("solution_{n:02}"),
        }
    }

    /// Whether this version has step `step` done (its "new" code).
    pub fn is_done(self, step: u8) -> bool {
        match self {
            Version::Starter(n) => step < n,
            Version::Solution(n) => step <= n,
        }
    }

    /// The step whose TODO markers this version shows, if any.
    pub fn todo(self) -> Option<u8> {
        match self {
            Version::Starter(n) => Some(n),
            Version::Solution(_) => None,
        }
    }

    /// The version itself, or an error if its step is not one of the lab's.
    pub fn validate(self) -> Result<Version, CourseError> {
        if usize::from(self.step()) < STEPS.len() {
            Ok(self)
        } else {
            Err(CourseError::NoSuchStep { step: self.step() })
        }
    }

    /// The step's title; panics for a step after [`LAST_STEP`] (see [`Version::validate`]).
    pub fn title(self) -> &'static str {
        STEPS[usize::from(self.step())]
    }

    /// The one-line description that goes into the crate's Cargo.toml.
    pub fn description(self) -> String {
        let kind = match self {
            Version::Starter(_) => "starter",
            Version::Solution(_) => "solution",
        };
        format!("ddp-lab step {} {kind}: {}", self.step(), self.title())
    }
}

/// The folder of the guide's Markdown sources (mdBook's `src`), relative to the repository root.
pub const GUIDE_SRC: &str = "lab-guide/src";

/// Step `step`'s page in the guide, relative to [`GUIDE_SRC`] (as `SUMMARY.md` links it;
/// the built book has it with `.html`): `steps/step-07.md`.
pub fn page_in_book(step: u8) -> PathBuf {
    PathBuf::from(format!("steps/step-{step:02}.md"))
}

/// Step `step`'s page in the guide, relative to the repository root:
/// `lab-guide/src/steps/step-07.md`.
pub fn guide_page(step: u8) -> PathBuf {
    Path::new(GUIDE_SRC).join(page_in_book(step))
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.crate_dir().display())
    }
}

/// Renders the master for one version: directives resolved, dead lines uncommented,
/// the header block replaced by the version's header, not yet formatted. Fails on a
/// malformed master, or if the result would be unusable (a starter without its TODO
/// marker, a directive, a `//|` or a `{{` left behind).
pub fn render_main(master: &str, version: Version) -> Result<String, CourseError> {
    let version = version.validate()?;
    let tree = markers::parse(master)?;
    let mut out = String::new();
    let mut marked = false;
    for emitted in markers::emit(&tree, version) {
        let line = match emitted {
            // Not counted as the TODO marker, though the starter's header names it.
            markers::Emitted::Header => {
                out.push_str(&header(version));
                continue;
            }
            markers::Emitted::Line(line) => line,
        };
        check_leftover(MASTER, line.no, &line.text, version)?;
        marked |= markers::has_todo_marker(&line.text, version.step());
        out.push_str(&line.text);
        out.push('\n');
    }
    match version {
        Version::Starter(step) if !marked => {
            Err(CourseError::MissingTodo { version: version.to_string(), step })
        }
        _ => Ok(out),
    }
}

/// The lines of step `step`'s code that give its answer away, as a hint or a students'
/// copy must not show them before they are asked for: each line step `step` adds (see
/// [`markers::step_code`]) trimmed of its indentation and of the `;`, `?`, `,`, `{` or `(`
/// that end it, each once. Left out, as no answer on their own: comments, lines of
/// fewer than 12 characters (`}`, `break`, `Ok(())`), a bare path, alone or called
/// without arguments (`dist::init_process_group(` opening a call over several lines,
/// `dist::barrier()?`: naming a function is the hint's second level), a condition
/// alone (`if global_rank == 0`: the guide says where in words), and text the step's starter already holds (code the step
/// keeps or moves).
pub fn answer_lines(master: &str, step: u8) -> Result<Vec<String>, CourseError> {
    let mut out: Vec<String> = Vec::new();
    for line in answer_blocks(master, step)?.into_iter().flatten() {
        if !out.contains(&line) {
            out.push(line);
        }
    }
    Ok(out)
}

/// [`answer_lines`] block by block: for each `//@ step N` block of step `step` in the
/// master, its telling lines (blocks without any left out).
pub fn answer_blocks(master: &str, step: u8) -> Result<Vec<Vec<String>>, CourseError> {
    let version = Version::Solution(step).validate()?;
    let tree = markers::parse(master)?;
    let starter: String = markers::select(&tree, Version::Starter(version.step()))
        .iter()
        .map(|l| code_of(&l.text) + "\n")
        .collect();
    let bare_path = |code: &str| {
        let path = code.strip_suffix("()").unwrap_or(code);
        path.chars().all(|c| c.is_alphanumeric() || c == '_' || c == ':')
    };
    // A condition alone (`if global_rank == 0`) says where, as the guide's words do.
    let condition = |code: &str| code.starts_with("if ") && !code.contains('{');
    let telling = |code: &String| {
        code.len() >= 12
            && !code.starts_with("//")
            && !bare_path(code)
            && !condition(code)
            && !starter.contains(code.as_str())
    };
    Ok(markers::step_code(&tree, step)
        .into_iter()
        .map(|block| block.iter().map(|line| code_of(&line.text)).filter(telling).collect::<Vec<_>>())
        .filter(|block| !block.is_empty())
        .collect())
}

/// A line of code as [`answer_lines`] compares it: no indentation, no closing punctuation.
pub fn code_of(line: &str) -> String {
    line.trim().trim_end_matches([';', '?', ',', '{', '(', ' ']).to_string()
}

/// The `//!` lines that open each rendered main.rs.
fn header(version: Version) -> String {
    let (n, title) = (version.step(), version.title());
    match version {
        Version::Starter(_) => format!(
            "//! ddp-lab, step {n}: {title}.\n\
             //!\n\
             //! Look for `TODO Step {n}`: those comments mark this step's work.\n\
             //! `cargo checker verify step {n}` checks it; `cargo checker hint step {n}` helps when you are stuck.\n"
        ),
        Version::Solution(LAB_LAST_STEP) => format!(
            "//! ddp-lab, solution of step {n}: {title}.\n\
             //!\n\
             //! This is the finished lab: every step is done.\n"
        ),
        Version::Solution(_) => format!("//! ddp-lab, solution of step {n}: {title}.\n"),
    }
}

/// Fills in the manifest template for one version: its `[package]` `name` and
/// `description` (and a `[[bin]]`'s `name = "{{name}}"`), set as TOML values (escaped as TOML needs), the rest of the template
/// as it is, comments included.
pub fn render_manifest(template: &str, version: Version) -> Result<String, CourseError> {
    let version = version.validate()?;
    let mut manifest = template
        .parse::<DocumentMut>()
        .map_err(|e| CourseError::ManifestTemplate { reason: format!("it is not valid TOML: {e}") })?;
    let package = manifest
        .get_mut("package")
        .and_then(Item::as_table_like_mut)
        .ok_or_else(|| CourseError::ManifestTemplate { reason: "it has no [package] table".into() })?;
    for (key, text) in [("name", version.package_name()), ("description", version.description())] {
        let Some(Item::Value(value)) = package.get_mut(key) else {
            return Err(CourseError::ManifestTemplate {
                reason: format!("its [package] table has no `{key} = \"{{{{{key}}}}}\"` line"),
            });
        };
        // The new string where the placeholder was, with the spacing and comment around it.
        let decor = value.decor().clone();
        *value = Value::from(text);
        *value.decor_mut() = decor;
    }
    // The crate's binary (a `[[bin]]` table, there to say `test = false`) is named as
    // the package: `{{name}}` there too.
    if let Some(bins) = manifest.get_mut("bin").and_then(Item::as_array_of_tables_mut) {
        for bin in bins.iter_mut() {
            if bin.get("name").and_then(Item::as_str) == Some("{{name}}") {
                bin.insert("name", toml_edit::value(version.package_name()));
            }
        }
    }
    let out = manifest.to_string();
    for (i, line) in out.lines().enumerate() {
        check_leftover(MANIFEST_TEMPLATE, i + 1, line, version)?;
    }
    Ok(out)
}

/// Errors unless `line` is free of `//@`, `//|` and `{{`, which only the master's sources may hold.
fn check_leftover(
    source_file: &'static str,
    line_no: usize,
    line: &str,
    version: Version,
) -> Result<(), CourseError> {
    match ["//@", markers::DEAD, "{{"].into_iter().find(|m| line.contains(m)) {
        Some(marker) => Err(CourseError::Leftover {
            source_file,
            line: line_no,
            marker,
            version: version.to_string(),
            text: line.trim().to_string(),
        }),
        None => Ok(()),
    }
}

/// Everything that can go wrong rendering the course. Master errors carry the master's
/// line number; the messages say what to change.
#[derive(Debug, thiserror::Error)]
pub enum CourseError {
    #[error(
        "{MASTER}:{line}: unknown directive `{text}`; a `//@` line must be `//@ step N`, \
         `//@ todo`, `//@ old`, `//@ end` or `//@ header`"
    )]
    UnknownDirective { line: usize, text: String },
    #[error("{MASTER}:{line}: `//@ step {found}`: the step must be a number from 0 to {LAST_STEP}")]
    BadStep { line: usize, found: String },
    #[error("{MASTER}:{line}: `//@ {directive}` outside any block; open one with `//@ step N` first")]
    NoOpenBlock { line: usize, directive: &'static str },
    #[error(
        "{MASTER}:{line}: a second `//@ {section}` in the block of step {step}; \
         each section appears at most once"
    )]
    RepeatedSection { line: usize, step: u8, section: &'static str },
    #[error(
        "{MASTER}:{line}: `//@ {section}` after `//@ {after}` in the block of step {step}; \
         sections go in the order new, todo, old"
    )]
    SectionOrder { line: usize, step: u8, section: &'static str, after: &'static str },
    #[error("{MASTER}:{line}: the block `//@ step {step}` opened here is never closed; add `//@ end`")]
    Unclosed { line: usize, step: u8 },
    #[error(
        "{MASTER}:{line}: the todo section of step {step} has no line with `TODO Step {step}`; \
         add a comment such as `// TODO Step {step}: ...` so students find their work"
    )]
    TodoWithoutMarker { line: usize, step: u8 },
    #[error(
        "{MASTER}:{line}: this line is in a todo or old section (of step {step}), which the \
         finished lab does not contain: comment it out as `//| ...` after its indentation, so \
         the master still compiles as the finished lab"
    )]
    LiveDead { line: usize, step: u8 },
    #[error(
        "{MASTER}:{line}: `//|` comments out a line of a todo or old section, but this line is \
         in the finished lab: remove the `//|`, or move the line into a `//@ todo` or `//@ old` \
         section"
    )]
    CommentedLive { line: usize },
    #[error(
        "{MASTER}:{line}: `//@ header` must stand at the top level, once; it marks where each \
         crate's header goes"
    )]
    MisplacedHeader { line: usize },
    #[error(
        "{MASTER}:{line}: a directive inside the header block opened at line {opened}; close it \
         with `//@ end` first"
    )]
    DirectiveInHeader { line: usize, opened: usize },
    #[error("{MASTER}:{line}: the header block opened here is never closed; add `//@ end`")]
    UnclosedHeader { line: usize },
    #[error("there is no step {step}: the lab's steps are 0 to {LAST_STEP}")]
    NoSuchStep { step: u8 },
    #[error(
        "{version}: the starter has no `TODO Step {step}` marker; give step {step}'s block in \
         {MASTER} a `//@ todo` section with one"
    )]
    MissingTodo { version: String, step: u8 },
    #[error(
        "{source_file}:{line}: `{marker}` would be left in {version} by the line {text:?}; directives must \
         stand alone on their line, `//|` only opens a dead line once, and `{{{{` is reserved for \
         the manifest template's substitutions ({{{{name}}}} and {{{{description}}}})"
    )]
    Leftover { source_file: &'static str, line: usize, marker: &'static str, version: String, text: String },
    #[error(
        "{MANIFEST_TEMPLATE}: {reason}; it must be a Cargo.toml whose [package] has \
         `name = \"{{{{name}}}}\"` and `description = \"{{{{description}}}}\"`"
    )]
    ManifestTemplate { reason: String },
    #[error("students-copy: {reason}")]
    CopyRefused { reason: String },
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("rustfmt is not on PATH; install it with `rustup component add rustfmt`")]
    RustfmtMissing,
    #[error(
        "rustfmt failed on the main.rs of {version} ({status}); its line numbers refer to \
         `cargo run -p coursegen -- render --raw ...`:\n{stderr}"
    )]
    Rustfmt { version: String, status: String, stderr: String },
}

/// Reads a file to a string, naming it in the error.
fn read(path: &Path) -> Result<String, CourseError> {
    std::fs::read_to_string(path).map_err(|source| CourseError::Io { path: path.to_path_buf(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steps_names_are_spelled_as_the_workspace_has_them() {
        assert_eq!(Version::Starter(7).package_name(), "step_07");
        assert_eq!(Version::Solution(7).package_name(), "solution_07");
        assert_eq!(Version::Starter(7).crate_dir(), Path::new("steps/step_07"));
        assert_eq!(Version::Solution(7).crate_dir(), Path::new("solutions/step_07"));
        assert_eq!(page_in_book(7), Path::new("steps/step-07.md"));
        assert_eq!(guide_page(7), Path::new("lab-guide/src/steps/step-07.md"));
    }
}
