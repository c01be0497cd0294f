//! `--prairielearn`: the results.json a PrairieLearn external grader leaves in
//! /grade/results, as "External Grading" documents it (docs.prairielearn.com/
//! externalGrading, section "Grading results", read 2026-11-28):
//!
//! - `score`: from 0 to 1, required when the submission is gradable;
//! - `gradable`: false marks the submission "invalid, not gradable": no points are
//!   awarded or lost and the student keeps the attempt; `format_errors` (a string or a
//!   list of strings) then says why. Here: nothing could be run (the program does not
//!   compile, or nothing holding one was handed in);
//! - `message`, `output`: shown above the tests;
//! - `tests`: each with `name`, `description`, `points`, `max_points`, `message`,
//!   `output`;
//! - the file should stay under 1 MB.
//!
//! - `images`: each a `url` (a data URI) and a `label`; here a figure per run of the
//!   step: its validation accuracy and images/sec, epoch by epoch, from rank 0's lines.
use base64::Engine;
use guide_svg::{Svg, INK, MUTED, RANK_FILL, RANK_STROKE};
use serde::Serialize;

use super::{keep_end, keep_start, summary};
use crate::grade::{CheckGrade, Grade, StepGrade};

// The limits below count characters; JSON may spend up to 6 bytes on one (a control
// character as \u001b), so the texts together stay under 160 Ki characters.
/// What the texts of all the tests may use together.
const TESTS_BUDGET: usize = 128 * 1024;
/// At most this much of one test's message, and of the program's output under it.
const TEST_TEXT_LIMIT: usize = 4000;
/// At most this much of the summary, and of the compiler's errors (they can be long).
const SUMMARY_LIMIT: usize = 16 * 1024;

#[derive(Debug, Serialize)]
pub struct Results {
    pub gradable: bool,
    /// Points earned over points possible; absent when not gradable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
    /// Why the submission could not be graded; only when not gradable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format_errors: Option<Vec<String>>,
    pub message: String,
    pub output: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<Image>,
    pub tests: Vec<Test>,
}

#[derive(Debug, Serialize)]
pub struct Image {
    pub label: String,
    /// `data:image/svg+xml;base64,...`
    pub url: String,
}

#[derive(Debug, Serialize)]
pub struct Test {
    pub name: String,
    /// What the check looks at, from the registry.
    pub description: String,
    pub points: f64,
    pub max_points: f64,
    pub message: String,
    pub output: String,
}

pub fn render(grade: &Grade) -> Results {
    let error = grade.error();
    let count = grade.steps.iter().map(|s| s.graded().count()).sum::<usize>().max(1);
    // Each test's message and output share what is left of the budget.
    let limit = TEST_TEXT_LIMIT.min(TESTS_BUDGET / (2 * count));
    let tests = grade.steps.iter().flat_map(|s| s.graded().map(move |c| test(s, c, limit))).collect();
    let max = grade.max_points();
    Results {
        gradable: error.is_none(),
        score: error.is_none().then(|| if max > 0.0 { grade.points() / max } else { 0.0 }),
        format_errors: error.map(|e| vec![keep_start(&e, SUMMARY_LIMIT)]),
        message: format!(
            "{} of {} points.",
            crate::grade::fmt_points(grade.points()),
            crate::grade::fmt_points(max)
        ),
        output: keep_start(&summary(grade, false), SUMMARY_LIMIT),
        images: figures(grade),
        tests,
    }
}

/// A figure per distinct run that printed epoch lines (`grade all` judges every step
/// from one run: one figure).
fn figures(grade: &Grade) -> Vec<Image> {
    let mut seen: Vec<&str> = Vec::new();
    let mut images = Vec::new();
    for step in grade.steps.iter().filter(|s| s.not_run.is_none()) {
        if seen.contains(&step.output.as_str()) {
            continue;
        }
        seen.push(&step.output);
        let epochs: Vec<labkit::EpochReport> =
            step.output.lines().filter_map(labkit::EpochReport::parse).collect();
        if epochs.is_empty() {
            continue;
        }
        let label = format!("Step {}'s run: validation accuracy and images/sec per epoch", step.step);
        let svg = run_figure(&epochs, &label);
        let url =
            format!("data:image/svg+xml;base64,{}", base64::engine::general_purpose::STANDARD.encode(svg));
        images.push(Image { label, url });
    }
    images
}

/// A chart's name, its scale, what it shows of an epoch, and its colour.
type Panel = (&'static str, f64, fn(&labkit::EpochReport) -> f64, usize);

/// Two bar charts side by side: validation accuracy (0 to 1) and images/sec (0 to the
/// most), a bar per epoch, each labelled with its value.
fn run_figure(epochs: &[labkit::EpochReport], title: &str) -> String {
    let (panel, height, top, bottom) = (300.0, 220.0, 50.0, 180.0);
    let mut svg = Svg::new(2.0 * panel + 40.0, height, title);
    svg.text(20.0, 28.0, "title", "", title);
    let most = epochs.iter().map(|e| e.images_per_sec).fold(0.0, f64::max).max(1.0);
    let panels: [Panel; 2] = [
        ("validation accuracy", 1.0, |e| e.validation_accuracy, 0),
        ("images/sec", most, |e| e.images_per_sec, 1),
    ];
    for (i, (name, scale, value, colour)) in panels.into_iter().enumerate() {
        let left = 20.0 + i as f64 * (panel + 20.0);
        svg.line(left, bottom, left + panel, bottom, &format!("stroke=\"{INK}\""));
        svg.text(left + panel / 2.0, height - 12.0, "body", "text-anchor=\"middle\"", name);
        let slot = panel / epochs.len() as f64;
        for (k, e) in epochs.iter().enumerate() {
            let v = value(e).max(0.0);
            let h = (bottom - top) * (v / scale).min(1.0);
            let x = left + k as f64 * slot + slot * 0.2;
            let attrs = format!("fill=\"{}\" stroke=\"{}\"", RANK_FILL[colour], RANK_STROKE[colour]);
            svg.rect(x, bottom - h, slot * 0.6, h, &attrs);
            let shown = if scale == 1.0 { format!("{v:.3}") } else { format!("{v:.0}") };
            svg.text(x + slot * 0.3, bottom - h - 4.0, "small", "text-anchor=\"middle\"", &shown);
            let epoch = format!("epoch {}", e.epoch);
            svg.text(
                x + slot * 0.3,
                bottom + 14.0,
                "small",
                &format!("text-anchor=\"middle\" fill=\"{MUTED}\""),
                &epoch,
            );
        }
    }
    svg.finish()
}

fn test(step: &StepGrade, check: &CheckGrade, limit: usize) -> Test {
    let passed = check.passed();
    let message = if passed { "passed".to_string() } else { check.message.clone().unwrap_or_default() };
    // The evidence for a pass; the program's output for a failure in a run that ran.
    let output = if passed {
        check.observed.clone()
    } else if step.not_run.is_none() {
        step.output.clone()
    } else {
        String::new()
    };
    Test {
        name: step.test_name(check),
        description: check.observes.to_string(),
        points: check.points,
        max_points: check.max_points,
        message: keep_start(&message, limit),
        output: keep_end(&output, limit),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::{step_00, step_08};
    use crate::grade::tests::{check, grade_of, step_run};
    use crate::grade::StepGrade;

    // Against https://docs.prairielearn.com/externalGrading/#grading-results: score in
    // [0, 1]; gradable; tests with name, description, points, max_points, message, output.
    #[test]
    fn a_graded_run_has_a_fractional_score_and_a_test_per_check() {
        let s = step_run(
            8,
            vec![check(step_08::THROUGHPUT_REDUCED, 8, true), check(step_08::EPOCH_BARRIER, 8, false)],
        );
        let r = render(&grade_of(vec![s]));
        assert!(r.gradable);
        assert_eq!(r.score, Some(0.5));
        assert_eq!(r.format_errors, None);
        assert_eq!(r.message, "5 of 10 points.");
        assert!(r.output.starts_with("Step 8 ("), "{}", r.output);
        assert!(r.output.contains("cargo checker verify step 8 --seed 7"), "{}", r.output);
        let t: Vec<(&str, f64, f64)> =
            r.tests.iter().map(|t| (t.name.as_str(), t.points, t.max_points)).collect();
        assert_eq!(t, [("step 8: throughput-reduced", 5.0, 5.0), ("step 8: epoch-barrier", 0.0, 5.0)]);
        assert_eq!(r.tests[0].message, "passed");
        assert_eq!(r.tests[0].output, "saw throughput-reduced");
        let message = &r.tests[1].message;
        assert!(message.starts_with("error[epoch-barrier]: step 8: saw epoch-barrier\n"), "{message}");
        assert!(message.contains("= expected: want\n") && message.contains("= hint: do it\n"), "{message}");
        assert_eq!(r.tests[1].output, "Epoch = 0 ...");
        assert!(!r.tests[1].description.is_empty());
        let json = serde_json::to_value(&r).unwrap();
        let mut keys: Vec<&String> = json.as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(keys, ["gradable", "message", "output", "score", "tests"]);
        let mut test_keys: Vec<&String> = json["tests"][0].as_object().unwrap().keys().collect();
        test_keys.sort();
        assert_eq!(test_keys, ["description", "max_points", "message", "name", "output", "points"]);
    }

    // "images": each {"label", "url": "data:[mimetype];base64,[contents]"}.
    #[test]
    fn a_run_that_printed_epochs_has_its_figure_as_a_data_uri() {
        let mut s = step_run(8, vec![check(step_08::THROUGHPUT_REDUCED, 8, true)]);
        s.output = "Epoch =  0: Cumulative Time = 2.000, Epoch Time = 2.000, Images/sec = 812.5, Validation Loss = 0.500, Validation Accuracy = 0.800\n\
                    Epoch =  1: Cumulative Time = 3.000, Epoch Time = 1.000, Images/sec = 990, Validation Loss = 0.400, Validation Accuracy = 0.850\n"
            .into();
        let r = render(&grade_of(vec![s.clone(), StepGrade { step: 9, ..s }]));
        assert_eq!(r.images.len(), 1, "one run, one figure");
        let url = &r.images[0].url;
        let data = url.strip_prefix("data:image/svg+xml;base64,").unwrap_or_else(|| panic!("{url}"));
        let svg = String::from_utf8(base64::engine::general_purpose::STANDARD.decode(data).unwrap()).unwrap();
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""), "{svg}");
        for shown in ["0.800", "0.850", "812", "990", "epoch 0", "epoch 1"] {
            assert!(svg.contains(&format!(">{shown}</text>")), "{shown} missing: {svg}");
        }
        assert!(r.images[0].label.starts_with("Step 8's run"));
        // Nothing ran, or no epoch line: no figure.
        assert!(render(&grade_of(vec![step_run(8, vec![])])).images.is_empty());
    }

    // "gradable: false ... no points will be awarded or lost, and the student will not
    // be penalized an attempt"; format_errors a string or a list of strings.
    #[test]
    fn a_program_that_does_not_compile_is_not_gradable() {
        let mut build = check(step_00::BUILDS, 0, false);
        build.observed = "cargo build failed:\nerror[E0425]: cannot find value `y` in this scope".into();
        let r = render(&grade_of(vec![step_run(1, vec![build])]));
        assert!(!r.gradable);
        assert_eq!(r.score, None);
        let errors = r.format_errors.as_deref().unwrap();
        assert_eq!(errors.len(), 1);
        assert!(errors[0].contains("error[E0425]: cannot find value `y`"), "{errors:?}");
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["gradable"], false);
        assert!(json.get("score").is_none());
        assert!(json["format_errors"][0].is_string());
    }

    /// PrairieLearn's limit on results.json.
    const SIZE_LIMIT: usize = 1 << 20;

    // "this file should be limited to 1 MB".
    #[test]
    fn a_huge_output_keeps_the_file_under_one_megabyte() {
        let mut s = step_run(
            8,
            vec![check(step_08::THROUGHPUT_REDUCED, 8, false), check(step_08::EPOCH_BARRIER, 8, false)],
        );
        s.output = "\u{1b}".repeat(2 << 20);
        for c in &mut s.checks {
            c.message = Some("\u{1b}".repeat(2 << 20));
        }
        let text = serde_json::to_string(&render(&grade_of(vec![s]))).unwrap();
        assert!(text.len() < SIZE_LIMIT, "{} bytes", text.len());
    }
}
