//! The report of a run, shaped as rustc's: each failing check first, once, shown at the
//! student's own line when the trace names one (their source with the line marked,
//! the diagnosis above it, what was expected and the hint under it); then every other
//! check a line each; the checks that could not be judged because the run stopped at
//! a mistake reported above, in one line; and a summary naming where to start.
//!
//! The terminal report (`verify`, `watch`) and every grading format's message for a
//! failing check ([`failure`]) come from here, so a platform shows the same shape.
//! Raw text the runs left (c10d's `CollectiveFingerPrint(...)` dumps) is shown only
//! with `--verbose` ([`set_verbose`]).
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use annotate_snippets::{AnnotationKind, Group, Level, Renderer, Snippet};

use crate::checks::{self, CheckResult, Verdict};
use crate::color;
use crate::verify::StepRun;

static VERBOSE: AtomicBool = AtomicBool::new(false);

/// `--verbose`: the raw text behind verdicts, in every report of this run. Process-wide,
/// as the colour choice is (see `color`): one choice for everything one run prints.
pub fn set_verbose(verbose: bool) {
    VERBOSE.store(verbose, Ordering::Relaxed);
}

pub fn verbose() -> bool {
    VERBOSE.load(Ordering::Relaxed)
}

/// `verify`: one step's full report; true when every check passed.
pub fn print_run(root: &Path, step: u8, seed: u64, run: &StepRun) -> bool {
    println!("== step {step} ({}): {}", run.package, run.variation.describe());
    println!("   (repeat exactly with --seed {seed})");
    if let Some(bin) = &run.prebuilt {
        println!(
            "   judging {}, built elsewhere from this course revision ({})",
            bin.display(),
            labkit::revision::COURSE_REVISION
        );
    }
    if let Some(dir) = &run.kept {
        println!("   run files kept in {}", dir.display());
    }
    // Through anstream: coloured or not as `--color` and NO_COLOR say (see `color`).
    anstream::print!("{}", render(root, step, &run.results, verbose()));
    run.results.iter().all(CheckResult::passed)
}

/// The report of a run of `step` with these results, coloured (anstream drops the
/// colour where the rule says none); with `verbose`, the raw error text too.
pub fn render(root: &Path, step: u8, results: &[CheckResult], verbose: bool) -> String {
    let mut out = String::new();
    for r in results.iter().filter(|r| r.failed()) {
        out.push_str(&failure(root, step, r, results, true, verbose));
        out.push_str("\n\n");
    }
    let paint = |verdict: Verdict| match verdict {
        Verdict::Pass => color::paint(color::PASS, "PASS"),
        Verdict::Fail => color::paint(color::FAIL, "FAIL"),
        Verdict::CouldNotJudge => color::paint(color::UNJUDGED, "????"),
        // Only `grade` says it, never of a check in a run's report.
        Verdict::Error => color::paint(color::FAIL, "ERR!"),
    };
    for r in results.iter().filter(|r| !r.failed() && r.stopped_at.is_none()) {
        let observed = without_raw(&r.observed, verbose);
        let mut lines = observed.lines();
        out.push_str(&format!(
            "{} step {:>2} {}: {}\n",
            paint(r.verdict),
            r.step,
            r.id,
            lines.next().unwrap_or("")
        ));
        if !r.passed() {
            for line in lines {
                out.push_str(&format!("         {line}\n"));
            }
            out.push_str(&format!("         expected: {}\n", r.expected));
        }
    }
    if let Some(line) = stopped_line(results, "the mistake above") {
        out.push_str(&format!("{} {line}\n", paint(Verdict::CouldNotJudge)));
    }
    let mut raws: Vec<&str> = Vec::new();
    for raw in results.iter().filter_map(|r| r.raw.as_deref()) {
        if !raws.contains(&raw) {
            raws.push(raw);
        }
    }
    if verbose {
        for raw in &raws {
            out.push_str(&format!("     raw error (--verbose): {raw}\n"));
        }
    } else if !raws.is_empty() {
        out.push_str("     (--verbose shows the failing rank's whole error)\n");
    }
    out.push_str(&summary(step, results));
    out.push('\n');
    out
}

/// `text` (what a program printed, or what a check observed of it) as reports show it:
/// each line of c10d's `CollectiveFingerPrint(...)` dumps cut to its first sentence,
/// unless `verbose`. Those lines run to hundreds of characters of tensor options that
/// add nothing once the report has named the collectives that differ.
pub fn without_raw(text: &str, verbose: bool) -> String {
    if verbose || !text.contains(C10D_DUMP) {
        return text.to_string();
    }
    let mut out: Vec<String> = Vec::new();
    for line in text.split('\n') {
        if !line.contains(C10D_DUMP) {
            out.push(line.to_string());
            continue;
        }
        let gist = crate::cut::first_sentence(line, 200).unwrap_or("");
        let (gist, sep) = if gist.is_empty() { ("", "") } else { (gist, " ") };
        out.push(format!(
            "{gist}{sep}[c10d's description of both calls, {} characters: --verbose]",
            line.chars().count() - gist.chars().count()
        ));
    }
    out.join("\n")
}

/// What marks a line of c10d's own description of the collectives that differ.
pub const C10D_DUMP: &str = "CollectiveFingerPrint(";

/// The checks of `results` that could not be judged because the run stopped at a
/// mistake that a failing check reports, in one line: "4 checks could not be judged:
/// the run stopped at {mistake} (trains, ...)"; `None` when there are none.
pub fn stopped_line(results: &[CheckResult], mistake: &str) -> Option<String> {
    let stopped: Vec<&str> = results.iter().filter(|r| r.stopped_at.is_some()).map(|r| r.id).collect();
    match stopped.len() {
        0 => None,
        1 => Some(format!("1 check could not be judged: the run stopped at {mistake} ({})", stopped[0])),
        n => Some(format!(
            "{n} checks could not be judged: the run stopped at {mistake} ({})",
            stopped.join(", ")
        )),
    }
}

/// One failing check as rustc shows an error: the diagnosis as the title, the
/// student's line marked with what to see there (when the finding names a line), then
/// what was expected, the hint, the guide's words on the check and where its page is.
/// `styled`: with colour codes (the terminal's, through anstream), else plain text
/// (the grading formats'); `verbose`: c10d's dumps whole.
pub fn failure(
    root: &Path,
    step: u8,
    r: &CheckResult,
    results: &[CheckResult],
    styled: bool,
    verbose: bool,
) -> String {
    let observed = without_raw(&r.observed, verbose);
    let mut lines = observed.lines();
    let title = format!("step {}: {}", r.step, lines.next().unwrap_or(""));
    let rest = lines;
    let mut group = Group::with_title(Level::ERROR.primary_title(title.as_str()).id(r.id));
    if let Some(at) = &r.excerpt {
        // The line's text from the call's column to its end, marked.
        let start = line_offset(&at.text, at.line - at.first_line);
        let marked = at.text[start..].lines().next().unwrap_or("");
        let from = start + char_offset(marked, at.column.saturating_sub(1));
        let to = start + marked.trim_end().len();
        let mut snippet = Snippet::source(at.text.as_str())
            .line_start(at.first_line)
            .path(at.path.as_str())
            .annotation(AnnotationKind::Primary.span(from..to.max(from)).label(at.label.as_str()));
        if at.first_line < at.line {
            // The line that opens the block the call sits in (its `if`).
            let opener = at.text.lines().next().unwrap_or("");
            let indent = opener.len() - opener.trim_start().len();
            let mut block = AnnotationKind::Context.span(indent..opener.trim_end().len());
            if opener.trim_start().starts_with("if ") {
                block = block.label("only the ranks for which this holds get there");
            }
            snippet = snippet.annotation(block);
        }
        group = group.element(snippet);
    }
    let rest: Vec<&str> = rest.collect();
    // The rest of what was observed (the compiler's errors, a rank's last lines) goes
    // as it is under the title, since it has its own layout; the notes then follow.
    let renderer = if styled { Renderer::styled() } else { Renderer::plain() };
    let mut out = String::new();
    let mut notes = if rest.is_empty() {
        group
    } else {
        out.push_str(&renderer.render(&[group]));
        for line in rest {
            out.push('\n');
            out.push_str(format!("    {line}").trim_end());
        }
        out.push('\n');
        Group::with_level(Level::NOTE)
    };
    notes = notes.element(Level::NOTE.with_name("expected").message(r.expected.as_str()));
    notes = notes.element(Level::HELP.with_name("hint").message(r.hint));
    // What the guide says this check is about, when a step's page names it, and where
    // that page is; for a check no page describes (`builds`), the page of the step checked.
    let about = guide_hints::check_hint_for(root, r.step, r.id)
        .map(|about| about.strip_prefix(&format!("`{}`: ", r.id)).unwrap_or(&about).to_string());
    if let Some(about) = &about {
        notes = notes.element(Level::NOTE.with_name("guide").message(about.as_str()));
    }
    let page_step = if about.is_some() { r.step } else { step };
    let page = guide_hints::book_location(root, page_step, Some(r.id));
    notes = notes.element(Level::NOTE.with_name("page").message(page.as_str()));
    // On a platform, each check is a test of its own: the checks this mistake left
    // unjudged are named in its message (the terminal names them in one line below).
    let stopped: Vec<CheckResult> = results.iter().filter(|s| s.stopped_at == Some(r.id)).cloned().collect();
    let stopped = if styled { None } else { stopped_line(&stopped, "this mistake") };
    if let Some(stopped) = &stopped {
        notes = notes.element(Level::NOTE.message(stopped.as_str()));
    }
    out.push_str(&renderer.render(&[notes]));
    out
}

/// The byte offset where line `n` (0-based) of `text` begins.
fn line_offset(text: &str, n: usize) -> usize {
    text.split_inclusive('\n').take(n).map(str::len).sum()
}

/// The byte offset of character `n` of `line` (its end when shorter).
fn char_offset(line: &str, n: usize) -> usize {
    line.char_indices().nth(n).map_or(line.len(), |(i, _)| i)
}

/// The last line: how many passed, how many could not be judged, and which step's own
/// checks to start with.
fn summary(step: u8, results: &[CheckResult]) -> String {
    let passed = results.iter().filter(|r| r.passed()).count();
    let unjudged = results.iter().filter(|r| r.verdict == Verdict::CouldNotJudge).count();
    let mut summary = format!("   {passed}/{} checks passed", results.len());
    if unjudged > 0 {
        summary.push_str(&format!(", {unjudged} could not be judged"));
    }
    if let Some(first) = checks::first_failing_step(results) {
        let ids: Vec<&str> = results.iter().filter(|r| r.failed() && r.step == first).map(|r| r.id).collect();
        summary.push_str(&format!(
            "; {} of step {first}'s own failed ({}){}",
            ids.len(),
            ids.join(", "),
            if first < step { ": start there" } else { "" }
        ));
    }
    summary
}

#[cfg(test)]
pub(crate) mod tests {
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::observe::{BuildFailure, Observation};

    /// A repository root holding only the guide's step pages: no built book, so every
    /// report names the pages' sources, whatever this checkout has built.
    pub(crate) fn guide_only() -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../lab-guide/src/steps");
        let to = root.path().join("lab-guide/src/steps");
        std::fs::create_dir_all(&to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
        root
    }

    pub(crate) fn fixture(name: &str) -> Observation {
        let path: PathBuf =
            [env!("CARGO_MANIFEST_DIR"), "fixtures/observations", name, "observation.json"].iter().collect();
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
    }

    /// The terminal report of a recorded run, without colour (as a pipe gets it).
    fn report_of(name: &str, verbose: bool) -> String {
        let obs = fixture(name);
        let root = guide_only();
        let text = render(root.path(), obs.step, &checks::judge(&obs), verbose);
        anstream::adapter::strip_str(&text).to_string()
    }

    /// The report's shape, with the guide's line numbers masked: the pages change
    /// more often than the report, and that a link lands on its check's line is
    /// guide-hints' test (`every_check_without_a_book_points_at_its_line_of_the_real_guide`).
    pub(crate) fn snapshot(name: &str, text: &str) {
        let text = regex::Regex::new(r"(step-\d\d\.md):\d+").unwrap().replace_all(text, "$1:[line]");
        insta::with_settings!({ snapshot_path => "../tests/snapshots", prepend_module_to_snapshot => false }, {
            insta::assert_snapshot!(name, text);
        });
    }

    #[test]
    fn a_collective_only_rank_0_reaches_is_shown_once_at_the_students_line() {
        let text = report_of("step-09-metrics-all-reduced-on-rank-0-only", false);
        snapshot("report_rank_0_only_all_reduce", &text);
        // The diagnosis once, at the line of the all_reduce inside `if global_rank == 0`.
        assert_eq!(text.matches("a collective only rank 0 reaches").count(), 1, "{text}");
        assert!(text.contains("--> src/main.rs:140:13"), "{text}");
        assert!(
            text.contains("140 |             dist::all_reduce(&mut metrics, dist::ReduceOp::Sum)?;"),
            "{text}"
        );
        assert!(text.contains("139 |         if global_rank == 0 {"), "{text}");
        // The checks the stopped run left unjudged: one line.
        assert_eq!(text.matches("could not be judged: the run stopped").count(), 1, "{text}");
        // c10d's dumps only with --verbose.
        assert!(!text.contains("CollectiveFingerPrint"), "{text}");
        let verbose = report_of("step-09-metrics-all-reduced-on-rank-0-only", true);
        assert!(verbose.contains("CollectiveFingerPrint"), "{verbose}");
        assert_eq!(verbose.matches("a collective only rank 0 reaches").count(), 1, "{verbose}");
    }

    #[test]
    fn a_sum_not_divided_is_named_in_the_labs_words() {
        let text = report_of("step-09-metrics-summed", false);
        snapshot("report_metrics_summed", &text);
        assert!(text.contains("× the mean: summed over"), "{text}");
        // The figures grouped, a line per epoch, not a line per rank and epoch.
        let figures: Vec<&str> = text.lines().filter(|l| l.trim_start().starts_with("epoch ")).collect();
        assert_eq!(figures.len(), 2, "{text}");
        assert!(figures.iter().all(|l| l.contains("ranks 0–2") && l.chars().count() <= 100), "{text}");
    }

    /// The summed fixture was recorded before the trace kept call sites; with the site
    /// its all_reduce has in the source (line 139), the report marks that line.
    #[test]
    fn a_sum_not_divided_is_marked_at_its_all_reduce_when_the_trace_names_the_line() {
        let path: PathBuf =
            [env!("CARGO_MANIFEST_DIR"), "fixtures/observations/step-09-metrics-summed/observation.json"]
                .iter()
                .collect();
        let mut json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let source = json["source"].as_str().unwrap().to_string();
        let line = source.lines().position(|l| l.contains("dist::all_reduce(&mut metrics")).unwrap() + 1;
        for record in json["main"]["trace"].as_array_mut().unwrap() {
            if record["op"] == "all_reduce" {
                record["site"] = format!("src/main.rs:{line}:9").into();
            }
        }
        let obs: Observation = serde_json::from_value(json).unwrap();
        let root = guide_only();
        let text =
            anstream::adapter::strip_str(&render(root.path(), 9, &checks::judge(&obs), false)).to_string();
        assert!(text.contains(&format!("--> src/main.rs:{line}:9")), "{text}");
        assert!(text.contains("^ the all_reduce (2 values); 3 × the mean after it"), "{text}");
    }

    /// Metrics read back in the other order: the summed run's reports made the mean's
    /// loss and accuracy swapped, its all_reduce given its site; the line is marked.
    #[test]
    fn swapped_metrics_are_named_and_marked_at_the_all_reduce() {
        let path: PathBuf =
            [env!("CARGO_MANIFEST_DIR"), "fixtures/observations/step-09-metrics-summed/observation.json"]
                .iter()
                .collect();
        let mut json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let source = json["source"].as_str().unwrap().to_string();
        let line = source.lines().position(|l| l.contains("dist::all_reduce(&mut metrics")).unwrap() + 1;
        let ranks = json["variation"]["ranks_per_node"].as_f64().unwrap()
            * json["variation"]["nodes"].as_f64().unwrap();
        for record in json["main"]["trace"].as_array_mut().unwrap() {
            if record["op"] == "all_reduce" {
                record["site"] = format!("src/main.rs:{line}:9").into();
            }
            if record["event"] == "epoch_report" {
                // What this run reported is the sum: the mean, swapped.
                let (accuracy, loss) = (
                    record["validation_accuracy"].as_f64().unwrap(),
                    record["validation_loss"].as_f64().unwrap(),
                );
                record["validation_accuracy"] = (loss / ranks).into();
                record["validation_loss"] = (accuracy / ranks).into();
            }
        }
        let obs: Observation = serde_json::from_value(json).unwrap();
        let root = guide_only();
        let text =
            anstream::adapter::strip_str(&render(root.path(), 9, &checks::judge(&obs), false)).to_string();
        assert!(
            text.contains(
                "every rank reports the mean loss as its accuracy and the mean accuracy as its loss"
            ),
            "{text}"
        );
        assert!(text.contains(&format!("--> src/main.rs:{line}:9")), "{text}");
        assert!(
            text.contains("^ the all_reduce (2 values); accuracy and loss read back swapped after it"),
            "{text}"
        );
    }

    /// A reduce to rank 1 (recorded before call sites were kept): given the site its
    /// reduce has in the source, the report marks that line with what went into it.
    #[test]
    fn a_wrong_reduce_is_marked_at_its_line_when_the_trace_names_it() {
        let path: PathBuf =
            [env!("CARGO_MANIFEST_DIR"), "fixtures/observations/step-08-reduce-to-rank-1/observation.json"]
                .iter()
                .collect();
        let mut json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let source = json["source"].as_str().unwrap().to_string();
        let line = source.lines().position(|l| l.contains("dist::reduce(")).unwrap() + 1;
        for record in json["main"]["trace"].as_array_mut().unwrap() {
            if record["op"] == "reduce" {
                record["site"] = format!("src/main.rs:{line}:9").into();
            }
        }
        let obs: Observation = serde_json::from_value(json).unwrap();
        let root = guide_only();
        let text =
            anstream::adapter::strip_str(&render(root.path(), 8, &checks::judge(&obs), false)).to_string();
        assert!(text.contains(&format!("--> src/main.rs:{line}:9")), "{text}");
        assert!(text.contains("^ rank 0's images/sec goes into this reduce(op=SUM, root=1)"), "{text}");
    }

    #[test]
    fn a_pass_is_a_line_per_check() {
        let text = report_of("solution-09", false);
        snapshot("report_pass", &text);
        assert!(!text.contains("error["), "{text}");
        assert!(text.lines().filter(|l| l.starts_with("PASS ")).count() >= 10, "{text}");
    }

    #[test]
    fn a_build_failure_shows_the_compilers_errors_once() {
        let errors = "error[E0425]: cannot find value `world_siz` in this scope\n --> steps/step_02/src/main.rs:42:9\n  |\n42 |     let w = world_siz;\n  |             ^^^^^^^^^ help: a local variable with a similar name exists: `world_size`\n\nerror: could not compile `step_02` (bin \"step_02\") due to 1 previous error";
        let failed = checks::build_failed("step_02", &BuildFailure::Errors(errors.into()));
        let root = guide_only();
        let text = anstream::adapter::strip_str(&render(root.path(), 2, &[failed], false)).to_string();
        snapshot("report_build_failure", &text);
        assert_eq!(text.matches("cannot find value `world_siz`").count(), 1, "{text}");
        assert!(text.contains("error[builds]: step 0: cargo build -p step_02 failed:"), "{text}");
        assert!(text.contains("lab-guide/src/steps/step-02.md:"), "{text}");
    }
}
