//! `--junit`: JUnit XML, as the Apache Ant JUnit schema defines it (Windy Road's
//! JUnit.xsd, which Jenkins, GitLab and most CIs read):
//!
//! - `testsuites` (no attributes) holds one `testsuite` per step, each with `name`,
//!   `package`, `id` (from 0), `timestamp` (UTC, `YYYY-MM-DDTHH:MM:SS`, no zone),
//!   `hostname`, `tests`, `failures`, `errors`, `skipped`, `time` (seconds), and in this
//!   order: `properties` (the seed, the sandbox, the command that repeats the run),
//!   the `testcase`s, `system-out` (the run's output) and `system-err`;
//! - a `testcase` has `name`, `classname` and `time`, and at most one child: `failure`
//!   (a check that failed) or `error` (a check that could not be judged, or a step
//!   that did not build), each with `type` (required) and `message`.
//!
//! `--codegrade`: the same for CodeGrade's AutoTest Unit Test step, which reads JUnit
//! XML from `$CG_JUNIT_XML_LOCATION` "except for the <properties> tag" (help.codegrade.com,
//! "Writing Unit Test wrapper scripts", read 2026-11-28), and scores the step as the
//! fraction of test cases passed: its suites have no `properties` and list only the
//! checks that carry points, so that fraction is the points earned over the points
//! possible.
//!
//! A check is judged from the runs of its step together, so a testcase has no time of
//! its own: its `time` is 0 and the step's build and runs are the suite's `time`.
use std::fmt::Write;

use crate::checks::Verdict;
use crate::grade::{CheckGrade, Grade, StepGrade};

/// Which checks a suite lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    /// `verify`: every check of the step's run.
    EveryCheck,
    /// `grade`: the step's own checks and the earlier ones it did not pass.
    Graded,
}

/// How much of a run's output `system-out` keeps (its end).
const SYSTEM_OUT_LIMIT: usize = 64 * 1024;

pub fn render(grade: &Grade, listing: Listing) -> String {
    render_suites(grade, true, |step| match listing {
        Listing::EveryCheck => step.checks.iter().collect(),
        Listing::Graded => step.graded().collect(),
    })
}

/// CodeGrade's JUnit: no `properties`, and only the checks that carry points.
pub fn render_codegrade(grade: &Grade) -> String {
    render_suites(grade, false, |step| step.graded().filter(|c| c.max_points > 0.0).collect())
}

fn render_suites<'g>(
    grade: &'g Grade,
    properties: bool,
    listed: impl Fn(&'g StepGrade) -> Vec<&'g CheckGrade>,
) -> String {
    let host = hostname();
    let mut xml = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n");
    for (id, step) in grade.steps.iter().enumerate() {
        let suite_of = Suite { grade, step, id, properties, host: &host };
        suite(&mut xml, &suite_of, &listed(step));
    }
    xml.push_str("</testsuites>\n");
    xml
}

/// One step's testsuite: where it is in the report, and whether it has properties.
struct Suite<'a> {
    grade: &'a Grade,
    step: &'a StepGrade,
    id: usize,
    properties: bool,
    host: &'a str,
}

fn suite(xml: &mut String, of: &Suite, checks: &[&CheckGrade]) {
    let Suite { grade, step, id, host, .. } = *of;
    let failures = checks.iter().filter(|c| c.verdict == Verdict::Fail).count();
    let errors =
        checks.iter().filter(|c| matches!(c.verdict, Verdict::Error | Verdict::CouldNotJudge)).count();
    let _ = writeln!(
        xml,
        "  <testsuite name=\"{}\" package=\"ddp-lab\" id=\"{id}\" timestamp=\"{}\" hostname=\"{}\" \
         tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\" skipped=\"0\" time=\"{:.3}\">",
        attr(&format!("step {}", step.step)),
        utc_timestamp(step.started),
        attr(host),
        checks.len(),
        step.seconds,
    );
    if of.properties {
        properties(xml, grade, step);
    }
    for check in checks {
        case(xml, check);
    }
    let out = super::keep_end(&step.output, SYSTEM_OUT_LIMIT);
    let _ = writeln!(xml, "    <system-out>{}</system-out>", text(&out));
    xml.push_str("    <system-err></system-err>\n  </testsuite>\n");
}

/// The seed, the sandbox and the command that repeats the run.
fn properties(xml: &mut String, grade: &Grade, step: &StepGrade) {
    xml.push_str("    <properties>\n");
    let mut properties = vec![
        ("step", format!("{} ({})", step.step, step.title)),
        ("seed", grade.seed.to_string()),
        ("sandbox", grade.confinement.describe()),
        ("repeat", step.repeat_command(grade.seed)),
    ];
    if let Some(found) = &grade.submission {
        properties.push(("submission", found.clone()));
    }
    for (name, value) in properties {
        let _ = writeln!(xml, "      <property name=\"{name}\" value=\"{}\"/>", attr(&value));
    }
    xml.push_str("    </properties>\n");
}

fn case(xml: &mut String, check: &CheckGrade) {
    let _ = write!(
        xml,
        "    <testcase name=\"{}\" classname=\"ddp-lab.{}\" time=\"0\"",
        attr(check.id),
        lab_course::Version::Starter(check.step).package_name()
    );
    let (element, kind) = match check.verdict {
        Verdict::Pass => {
            xml.push_str("/>\n");
            return;
        }
        Verdict::Fail => ("failure", "check failed"),
        Verdict::CouldNotJudge => ("error", "could not judge"),
        Verdict::Error => ("error", "did not run"),
    };
    let message = check.message.as_deref().unwrap_or(&check.observed);
    // The attribute carries the first line (CIs show it as the summary), the element
    // the whole message.
    let first = message.lines().next().unwrap_or("");
    let _ = writeln!(
        xml,
        ">\n      <{element} type=\"{kind}\" message=\"{}\">{}</{element}>\n    </testcase>",
        attr(first),
        text(message)
    );
}

/// Character data: `&`, `<`, `>` escaped, and the characters XML 1.0 cannot hold at
/// all (control characters such as a terminal's escape) replaced by U+FFFD.
fn text(s: &str) -> String {
    escape(s, false)
}

/// An attribute value: as [`text`], with quotes escaped and line breaks and tabs as
/// character references (a parser would turn them into spaces otherwise).
fn attr(s: &str) -> String {
    escape(s, true)
}

fn escape(s: &str, attribute: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' if attribute => out.push_str("&quot;"),
            '\n' if attribute => out.push_str("&#10;"),
            '\r' if attribute => out.push_str("&#13;"),
            '\t' if attribute => out.push_str("&#9;"),
            c => out.push(allowed(c)),
        }
    }
    out
}

/// XML 1.0's Char production: tab, newline, carriage return and U+0020 up, less the
/// surrogates (never in a Rust `char`) and U+FFFE/U+FFFF.
fn allowed(c: char) -> char {
    match c {
        '\t' | '\n' | '\r' => c,
        '\u{0}'..='\u{1f}' | '\u{fffe}' | '\u{ffff}' => '\u{fffd}',
        c => c,
    }
}

/// `YYYY-MM-DDTHH:MM:SS` in UTC for a Unix time (the schema's pattern, no zone).
fn utc_timestamp(unix: u64) -> String {
    let (days, secs) = (unix / 86_400, unix % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}", secs / 3600, secs % 3600 / 60, secs % 60)
}

/// The proleptic Gregorian date of a day count from 1970-01-01: shift to years that
/// start on 1 March (so the leap day ends a year), split into 400-year eras of
/// 146097 days, then into years, and back to January-based months.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153; // 0 = March
    let day = (day_of_year - (153 * month_index + 2) / 5 + 1) as u32;
    let month = if month_index < 10 { month_index + 3 } else { month_index - 9 } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// This machine's name, or "localhost" (the schema's word for "unknown").
fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let name = if ok {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).trim().to_string()
    } else {
        String::new()
    };
    if name.is_empty() {
        "localhost".into()
    } else {
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::{step_00, step_08};
    use crate::grade::tests::{check, grade_of, step_run};

    #[test]
    fn dates_are_utc_calendar_dates() {
        assert_eq!(utc_timestamp(0), "1970-01-01T00:00:00");
        assert_eq!(utc_timestamp(951_782_400), "2000-02-29T00:00:00");
        assert_eq!(utc_timestamp(1_700_000_000), "2023-11-14T22:13:20");
        assert_eq!(utc_timestamp(4_107_542_399), "2100-02-28T23:59:59");
        assert_eq!(utc_timestamp(4_107_542_400), "2100-03-01T00:00:00");
    }

    #[test]
    fn text_and_attributes_are_escaped_and_xml_safe() {
        assert_eq!(text("a<b> & \"c\"\n\x1b[31m"), "a&lt;b&gt; &amp; \"c\"\n\u{fffd}[31m");
        assert_eq!(attr("x=\"1\"\n\ty<2"), "x=&quot;1&quot;&#10;&#9;y&lt;2");
    }

    #[test]
    fn counts_follow_the_verdicts() {
        let mut unjudged = check(step_08::EPOCH_BARRIER, 8, false);
        unjudged.verdict = Verdict::CouldNotJudge;
        let s = step_run(
            8,
            vec![
                check(step_00::IMPORTS_DIST, 0, true),
                check(step_00::TRAINS, 0, false),
                check(step_08::THROUGHPUT_REDUCED, 8, true),
                unjudged,
            ],
        );
        let g = grade_of(vec![s]);
        let graded = render(&g, Listing::Graded);
        assert!(graded.contains("tests=\"3\" failures=\"1\" errors=\"1\""), "{graded}");
        assert!(graded.contains(
            "<testcase name=\"trains\" classname=\"ddp-lab.step_00\" time=\"0\">\n      <failure type=\"check failed\" message=\"error[trains]: step 0: saw trains\">error[trains]: step 0: saw trains\n"
        ), "{graded}");
        assert!(graded.contains("= hint: do it\n"), "{graded}");
        assert!(graded.contains("<error type=\"could not judge\""), "{graded}");
        assert!(graded.contains("timestamp=\"2023-11-14T22:13:20\""), "{graded}");
        assert!(graded.contains("time=\"12.500\""), "{graded}");
        assert!(graded.contains("<property name=\"seed\" value=\"7\"/>"), "{graded}");
        assert!(graded.contains("<system-out>Epoch = 0 ...</system-out>"), "{graded}");
        // verify lists every check of the run, passed ones too.
        let every = render(&g, Listing::EveryCheck);
        assert!(every.contains("tests=\"4\" failures=\"1\" errors=\"1\""), "{every}");
        assert!(
            every.contains("<testcase name=\"imports-dist\" classname=\"ddp-lab.step_00\" time=\"0\"/>"),
            "{every}"
        );
    }

    // CodeGrade reads this format "except for the <properties> tag", and scores the
    // fraction of test cases passed (help.codegrade.com, "Writing Unit Test wrapper
    // scripts"; docs.codegra.de/guides/setting-up-unittest.html).
    #[test]
    fn codegrades_suites_have_no_properties_and_only_the_checks_with_points() {
        let s = step_run(
            8,
            vec![
                check(step_00::TRAINS, 0, false),
                check(step_08::THROUGHPUT_REDUCED, 8, true),
                check(step_08::EPOCH_BARRIER, 8, false),
            ],
        );
        let xml = render_codegrade(&grade_of(vec![s]));
        assert!(!xml.contains("<properties"), "{xml}");
        assert!(xml.contains("tests=\"2\" failures=\"1\" errors=\"0\""), "{xml}");
        assert!(!xml.contains("name=\"trains\""), "an earlier step's check carries no points: {xml}");
        assert!(xml.contains("<testcase name=\"throughput-reduced\""), "{xml}");
        assert!(xml.contains("<system-out>Epoch = 0 ...</system-out>"), "{xml}");
    }
}
