//! Validators of the three report formats, written from each one's published text
//! (not from the checker's output), so a test fails where a report departs from them:
//!
//! - exercism's test-runner interface (exercism/docs, building/tooling/test-runners/
//!   interface.md, revision of 2026-05-30);
//! - Gradescope's "Autograder Specifications" (gradescope/autograder_samples,
//!   docs/specs.md): the keys and values of results.json;
//! - the Apache Ant JUnit schema (Windy Road's JUnit.xsd), element by element and
//!   attribute by attribute, as an XSD validator would check it.
//!
//! - PrairieLearn's "External Grading" (docs.prairielearn.com/externalGrading,
//!   "Grading results"): results.json;
//! - Autolab's "Guide for Lab Authors" (docs.autolabproject.com/lab, "Writing
//!   Autograders"): the autoresult;
//! - CodeRunner's "Combinator-template grading" (coderunner.org.nz documentation
//!   V3.2.1, 8.2): what a combinator template grader prints;
//! - GitHub Classroom's grader actions (autograding-command-grader src/main.js) and
//!   grading reporter (autograding-grading-reporter src/main.js, notify-classroom.js):
//!   a runner's result;
//! - CodeGrade's Unit Test step (help.codegrade.com, "Writing Unit Test wrapper
//!   scripts"): JUnit XML without `<properties>`.
//!
//! Each returns the violations it found (none: valid).
use serde_json::Value;

fn keys_within(object: &Value, allowed: &[&str], what: &str, problems: &mut Vec<String>) {
    let Some(map) = object.as_object() else {
        problems.push(format!("{what} is not an object: {object}"));
        return;
    };
    for key in map.keys() {
        if !allowed.contains(&key.as_str()) {
            problems.push(format!("{what} has `{key}`, which the spec does not define"));
        }
    }
}

fn is_string_or_absent(v: Option<&Value>) -> bool {
    v.is_none_or(|v| v.is_string())
}

/// exercism's results.json, version 3.
pub fn exercism_v3(report: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    keys_within(report, &["version", "status", "message", "tests"], "the top level", &mut problems);
    if report["version"] != 3 {
        problems.push(format!("version must be the number 3, is {}", report["version"]));
    }
    let status = report["status"].as_str().unwrap_or("");
    if !["pass", "fail", "error"].contains(&status) {
        problems.push(format!("status must be pass, fail or error, is {}", report["status"]));
    }
    match (status, report.get("message")) {
        ("error", Some(Value::String(m))) => {
            // "limited to 65535 characters ... less if the value contains multibyte characters"
            if m.len() > 65535 {
                problems.push(format!("the top-level message has {} bytes, over 65535", m.len()));
            }
        }
        ("error", _) => problems.push("status error requires a top-level message (a string)".into()),
        (_, None | Some(Value::Null)) => {}
        (_, Some(m)) => problems.push(format!("status {status}: message must be null or absent, is {m}")),
    }
    let tests = match report.get("tests") {
        Some(Value::Array(tests)) => tests.as_slice(),
        None if status == "error" => &[],
        other => {
            problems.push(format!("tests must be an array (required with pass and fail), is {other:?}"));
            &[]
        }
    };
    let mut statuses = Vec::new();
    for (i, t) in tests.iter().enumerate() {
        let what = format!("test {i}");
        keys_within(
            t,
            &["name", "test_code", "status", "message", "output", "task_id"],
            &what,
            &mut problems,
        );
        if !t["name"].is_string() {
            problems.push(format!("{what}: name is required, a string"));
        }
        let s = t["status"].as_str().unwrap_or("");
        if !["pass", "fail", "error"].contains(&s) {
            problems.push(format!("{what}: status must be pass, fail or error, is {}", t["status"]));
        }
        statuses.push(s);
        match (s, t.get("message")) {
            ("fail" | "error", Some(Value::String(_))) => {}
            ("fail" | "error", _) => problems.push(format!("{what}: status {s} requires a message")),
            (_, m) if is_string_or_absent(m) || m == Some(&Value::Null) => {}
            (_, m) => problems.push(format!("{what}: message must be a string, null or absent, is {m:?}")),
        }
        match t.get("output") {
            None | Some(Value::Null) => {}
            Some(Value::String(o)) if o.chars().count() <= 500 => {}
            Some(o) => problems.push(format!("{what}: output must be a string of at most 500 chars: {o}")),
        }
        // SHOULD for practice exercises: the checker always gives it.
        if !t["test_code"].is_string() {
            problems.push(format!("{what}: test_code missing"));
        }
        if let Some(id) = t.get("task_id") {
            if id.as_u64().is_none_or(|n| n < 1) {
                problems.push(format!("{what}: task_id must be a task's number (from 1), is {id}"));
            }
        }
    }
    let consistent = match status {
        "pass" => statuses.iter().all(|s| *s == "pass"),
        "fail" => statuses.iter().any(|s| *s == "fail" || *s == "error"),
        "error" => statuses.iter().all(|s| *s == "error"),
        _ => true,
    };
    if !consistent {
        problems.push(format!("overall status {status} does not follow from the tests' {statuses:?}"));
    }
    problems
}

const VISIBILITIES: [&str; 4] = ["hidden", "after_due_date", "after_published", "visible"];
const FORMATS: [&str; 5] = ["text", "html", "simple_format", "md", "ansi"];

fn one_of(v: Option<&Value>, allowed: &[&str], what: &str, problems: &mut Vec<String>) {
    if let Some(v) = v {
        if !v.as_str().is_some_and(|s| allowed.contains(&s)) {
            problems.push(format!("{what} must be one of {allowed:?}, is {v}"));
        }
    }
}

fn number_or_absent(v: Option<&Value>, what: &str, problems: &mut Vec<String>) {
    if v.is_some_and(|v| !v.is_number()) {
        problems.push(format!("{what} must be a number"));
    }
}

/// Gradescope's results.json.
pub fn gradescope(report: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let top = [
        "score",
        "execution_time",
        "output",
        "output_format",
        "test_output_format",
        "test_name_format",
        "visibility",
        "stdout_visibility",
        "extra_data",
        "tests",
        "leaderboard",
    ];
    keys_within(report, &top, "the top level", &mut problems);
    number_or_absent(report.get("score"), "score", &mut problems);
    number_or_absent(report.get("execution_time"), "execution_time", &mut problems);
    if !is_string_or_absent(report.get("output")) {
        problems.push("output must be a string".into());
    }
    for key in ["output_format", "test_output_format", "test_name_format"] {
        one_of(report.get(key), &FORMATS, key, &mut problems);
    }
    for key in ["visibility", "stdout_visibility"] {
        one_of(report.get(key), &VISIBILITIES, key, &mut problems);
    }
    // "leaderboard": [{"name": ..., "value": ..., "order": "asc" or "desc" (optional)}]
    if let Some(board) = report.get("leaderboard") {
        let entries = board.as_array().map(Vec::as_slice).unwrap_or_default();
        if !board.is_array() {
            problems.push("leaderboard must be an array".into());
        }
        for (i, e) in entries.iter().enumerate() {
            keys_within(e, &["name", "value", "order"], &format!("leaderboard {i}"), &mut problems);
            if !e["name"].is_string() || !(e["value"].is_number() || e["value"].is_string()) {
                problems.push(format!("leaderboard {i} needs a name and a value"));
            }
            one_of(e.get("order"), &["asc", "desc"], &format!("leaderboard {i}: order"), &mut problems);
        }
    }
    if report.get("extra_data").is_some_and(|e| !e.is_object()) {
        problems.push("extra_data must be an object".into());
    }
    let tests = report.get("tests").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
    if report.get("tests").is_some_and(|t| !t.is_array()) {
        problems.push("tests must be an array".into());
    }
    // "score: optional, but required if not on each test case below"
    if report.get("score").is_none() && (tests.is_empty() || tests.iter().any(|t| t.get("score").is_none())) {
        problems.push("no top-level score, and not every test has one".into());
    }
    let per_test = [
        "score",
        "max_score",
        "status",
        "name",
        "name_format",
        "number",
        "output",
        "output_format",
        "tags",
        "visibility",
        "extra_data",
    ];
    for (i, t) in tests.iter().enumerate() {
        let what = format!("test {i}");
        keys_within(t, &per_test, &what, &mut problems);
        number_or_absent(t.get("score"), &format!("{what}: score"), &mut problems);
        number_or_absent(t.get("max_score"), &format!("{what}: max_score"), &mut problems);
        one_of(t.get("status"), &["passed", "failed"], &format!("{what}: status"), &mut problems);
        one_of(t.get("visibility"), &VISIBILITIES, &format!("{what}: visibility"), &mut problems);
        one_of(t.get("output_format"), &FORMATS, &format!("{what}: output_format"), &mut problems);
        one_of(t.get("name_format"), &FORMATS, &format!("{what}: name_format"), &mut problems);
        for key in ["name", "number", "output"] {
            if !is_string_or_absent(t.get(key)) {
                problems.push(format!("{what}: {key} must be a string"));
            }
        }
        if t.get("tags").is_some_and(|tags| !tags.as_array().is_some_and(|a| a.iter().all(Value::is_string)))
        {
            problems.push(format!("{what}: tags must be an array of strings"));
        }
    }
    problems
}

/// What a JUnit report says, for a test's assertions.
#[derive(Debug)]
pub struct Suite {
    pub name: String,
    pub properties: Vec<(String, String)>,
    pub cases: Vec<Case>,
    pub system_out: String,
}

#[derive(Debug)]
pub struct Case {
    pub name: String,
    pub classname: String,
    /// `failure` or `error` (none: passed), its `type`, `message` and text.
    pub outcome: Option<(String, String, Option<String>, String)>,
}

/// A JUnit XML report against Windy Road's JUnit.xsd: the suites it holds, or the
/// violations.
pub fn junit(xml: &str) -> Result<Vec<Suite>, Vec<String>> {
    junit_of(xml, true)
}

/// JUnit XML whose suites begin with `properties` (the schema's), or have none (CodeGrade's).
fn junit_of(xml: &str, properties: bool) -> Result<Vec<Suite>, Vec<String>> {
    let doc = match roxmltree::Document::parse(xml) {
        Ok(doc) => doc,
        Err(e) => return Err(vec![format!("not well-formed XML: {e}")]),
    };
    let mut problems = Vec::new();
    let root = doc.root_element();
    if root.tag_name().name() != "testsuites" {
        problems.push(format!("the root is <{}>, not <testsuites>", root.tag_name().name()));
    }
    // The aggregate element has no attributes in the schema.
    for a in root.attributes() {
        problems
            .push(format!("<testsuites> has the attribute {}, which the schema does not define", a.name()));
    }
    let mut suites = Vec::new();
    for (index, suite) in children(root, &mut problems).into_iter().enumerate() {
        if suite.tag_name().name() != "testsuite" {
            problems.push(format!("<testsuites> holds <{}>", suite.tag_name().name()));
            continue;
        }
        suites.push(testsuite(suite, index, properties, &mut problems));
    }
    if problems.is_empty() {
        Ok(suites)
    } else {
        Err(problems)
    }
}

/// Element children; any non-whitespace text between them is a violation.
fn children<'a>(node: roxmltree::Node<'a, 'a>, problems: &mut Vec<String>) -> Vec<roxmltree::Node<'a, 'a>> {
    let mut out = Vec::new();
    for child in node.children() {
        if child.is_element() {
            out.push(child);
        } else if child.is_text() && !child.text().unwrap_or("").trim().is_empty() {
            problems.push(format!("text inside <{}>, which holds elements only", node.tag_name().name()));
        }
    }
    out
}

fn attributes_within(node: roxmltree::Node, allowed: &[&str], problems: &mut Vec<String>) {
    for a in node.attributes() {
        if !allowed.contains(&a.name()) {
            problems.push(format!(
                "<{}> has the attribute {}, which the schema does not define",
                node.tag_name().name(),
                a.name()
            ));
        }
    }
}

fn required<'a>(node: roxmltree::Node<'a, 'a>, name: &str, problems: &mut Vec<String>) -> &'a str {
    node.attribute(name).unwrap_or_else(|| {
        problems.push(format!("<{}> lacks its required attribute {name}", node.tag_name().name()));
        ""
    })
}

fn is_int(s: &str) -> bool {
    s.trim_start_matches(['+', '-']).parse::<u32>().is_ok() && !s.is_empty()
}

fn is_decimal(s: &str) -> bool {
    let digits = s.trim_start_matches(['+', '-']);
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    !(whole.is_empty() && fraction.is_empty())
        && whole.chars().all(|c| c.is_ascii_digit())
        && fraction.chars().all(|c| c.is_ascii_digit())
}

fn is_timestamp(s: &str) -> bool {
    // [0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}, no zone
    let shape = "dddd-dd-ddTdd:dd:dd";
    s.len() == shape.len()
        && s.chars().zip(shape.chars()).all(|(c, p)| if p == 'd' { c.is_ascii_digit() } else { c == p })
}

fn testsuite(suite: roxmltree::Node, index: usize, properties: bool, problems: &mut Vec<String>) -> Suite {
    let allowed =
        ["name", "timestamp", "hostname", "tests", "failures", "errors", "skipped", "time", "package", "id"];
    attributes_within(suite, &allowed, problems);
    let name = required(suite, "name", problems).to_string();
    if name.trim().is_empty() {
        problems.push("a testsuite's name must not be empty".into());
    }
    if !is_timestamp(required(suite, "timestamp", problems)) {
        problems.push(format!("testsuite {name}: timestamp is not YYYY-MM-DDTHH:MM:SS"));
    }
    if required(suite, "hostname", problems).trim().is_empty() {
        problems.push(format!("testsuite {name}: empty hostname"));
    }
    required(suite, "package", problems);
    if required(suite, "id", problems) != index.to_string() {
        problems.push(format!("testsuite {name}: id must count from 0 (expected {index})"));
    }
    for counter in ["tests", "failures", "errors"] {
        if !is_int(required(suite, counter, problems)) {
            problems.push(format!("testsuite {name}: {counter} is not an int"));
        }
    }
    if suite.attribute("skipped").is_some_and(|s| !is_int(s)) {
        problems.push(format!("testsuite {name}: skipped is not an int"));
    }
    if !is_decimal(required(suite, "time", problems)) {
        problems.push(format!("testsuite {name}: time is not a decimal"));
    }
    let elements = children(suite, problems);
    let order: Vec<&str> = elements.iter().map(|e| e.tag_name().name()).collect();
    // properties, testcase*, system-out, system-err: in that order, each once but the cases.
    let first = usize::from(properties);
    let well_ordered = order.len() >= first + 2
        && (!properties || order[0] == "properties")
        && order[order.len() - 2] == "system-out"
        && order[order.len() - 1] == "system-err"
        && order[first..order.len() - 2].iter().all(|e| *e == "testcase");
    if !well_ordered {
        let wanted = if properties { "properties, " } else { "" };
        problems.push(format!(
            "testsuite {name}: children {order:?}, not {wanted}testcase*, system-out, system-err"
        ));
    }
    let mut properties = Vec::new();
    let mut cases = Vec::new();
    let mut system_out = String::new();
    let mut counted = [0usize; 4]; // tests, failures, errors, skipped
    for e in elements {
        match e.tag_name().name() {
            "properties" => {
                attributes_within(e, &[], problems);
                for p in children(e, problems) {
                    if p.tag_name().name() != "property" || p.has_children() {
                        problems.push(format!("<properties> holds <{}> with content", p.tag_name().name()));
                    }
                    attributes_within(p, &["name", "value"], problems);
                    let key = required(p, "name", problems);
                    if key.trim().is_empty() {
                        problems.push("a property's name must not be empty".into());
                    }
                    properties.push((key.to_string(), required(p, "value", problems).to_string()));
                }
            }
            "testcase" => {
                counted[0] += 1;
                attributes_within(e, &["name", "classname", "time"], problems);
                let case_name = required(e, "name", problems).to_string();
                let classname = required(e, "classname", problems).to_string();
                if !is_decimal(required(e, "time", problems)) {
                    problems.push(format!("testcase {case_name}: time is not a decimal"));
                }
                let inner = children(e, problems);
                if inner.len() > 1 {
                    problems.push(format!("testcase {case_name}: more than one of skipped, error, failure"));
                }
                let mut outcome = None;
                for o in inner {
                    let kind = o.tag_name().name();
                    match kind {
                        "skipped" => counted[3] += 1,
                        "failure" | "error" => {
                            counted[if kind == "failure" { 1 } else { 2 }] += 1;
                            attributes_within(o, &["type", "message"], problems);
                            let type_ = required(o, "type", problems).to_string();
                            if o.children().any(|c| c.is_element()) {
                                problems.push(format!("testcase {case_name}: <{kind}> holds elements"));
                            }
                            let text = o.text().unwrap_or("").to_string();
                            outcome = Some((
                                kind.to_string(),
                                type_,
                                o.attribute("message").map(String::from),
                                text,
                            ));
                        }
                        other => problems.push(format!("testcase {case_name} holds <{other}>")),
                    }
                }
                cases.push(Case { name: case_name, classname, outcome });
            }
            "system-out" | "system-err" => {
                attributes_within(e, &[], problems);
                if e.children().any(|c| c.is_element()) {
                    problems.push(format!("<{}> holds elements", e.tag_name().name()));
                }
                if e.tag_name().name() == "system-out" {
                    system_out = e.text().unwrap_or("").to_string();
                }
            }
            _ => {}
        }
    }
    for (i, counter) in ["tests", "failures", "errors", "skipped"].iter().enumerate() {
        let said = suite.attribute(*counter).and_then(|v| v.parse::<usize>().ok()).unwrap_or(0);
        if said != counted[i] {
            problems.push(format!("testsuite {name}: {counter}=\"{said}\" but it holds {}", counted[i]));
        }
    }
    Suite { name, properties, cases, system_out }
}

fn number_in(v: Option<&Value>, low: f64, high: f64, what: &str, problems: &mut Vec<String>) {
    match v.and_then(Value::as_f64) {
        Some(x) if (low..=high).contains(&x) => {}
        _ => problems.push(format!("{what} must be a number from {low} to {high}, is {v:?}")),
    }
}

/// PrairieLearn's results.json (the text of the file, to check its size too).
pub fn prairielearn(text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    // "this file should be limited to 1 MB"
    if text.len() > 1 << 20 {
        problems.push(format!("results.json has {} bytes, over 1 MB", text.len()));
    }
    let report: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => return vec![format!("not JSON: {e}")],
    };
    let top = ["gradable", "score", "format_errors", "message", "output", "images", "tests"];
    keys_within(&report, &top, "the top level", &mut problems);
    let gradable = match report.get("gradable") {
        None => true,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            problems.push(format!("gradable must be a boolean, is {other}"));
            true
        }
    };
    if gradable {
        // "the result only has one mandatory field: score ... in the range [0.0, 1.0]"
        number_in(report.get("score"), 0.0, 1.0, "score", &mut problems);
        if report.get("format_errors").is_some() {
            problems.push("format_errors belongs to a submission that is not gradable".into());
        }
    } else {
        // "either a string or an array of strings"
        let ok = match report.get("format_errors") {
            Some(Value::String(_)) => true,
            Some(Value::Array(a)) => a.iter().all(Value::is_string),
            _ => false,
        };
        if !ok {
            problems.push("a submission that is not gradable says why in format_errors".into());
        }
    }
    for key in ["message", "output"] {
        if !is_string_or_absent(report.get(key)) {
            problems.push(format!("{key} must be a string"));
        }
    }
    prairielearn_images(report.get("images"), "images", &mut problems);
    let tests = report.get("tests").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
    for (i, t) in tests.iter().enumerate() {
        let what = format!("test {i}");
        prairielearn_images(t.get("images"), &format!("{what}: images"), &mut problems);
        let keys = ["name", "description", "points", "max_points", "message", "output", "images"];
        keys_within(t, &keys, &what, &mut problems);
        if !t["name"].is_string() {
            problems.push(format!("{what}: name must be a string"));
        }
        for key in ["description", "message", "output"] {
            if !is_string_or_absent(t.get(key)) {
                problems.push(format!("{what}: {key} must be a string"));
            }
        }
        let max = t["max_points"].as_f64().unwrap_or(f64::NAN);
        number_in(t.get("points"), 0.0, max, &format!("{what}: points (of max_points)"), &mut problems);
    }
    problems
}

/// PrairieLearn's `images`: each an object with a `url` ("typically ... data:[mimetype];
/// base64,[contents]") and an optional `label`, or, as older graders wrote it, the URL alone.
fn prairielearn_images(images: Option<&Value>, what: &str, problems: &mut Vec<String>) {
    let Some(images) = images else { return };
    let Some(list) = images.as_array() else {
        problems.push(format!("{what} must be an array"));
        return;
    };
    for (i, image) in list.iter().enumerate() {
        let url = match image {
            Value::String(url) => Some(url.as_str()),
            Value::Object(_) => {
                keys_within(image, &["url", "label"], &format!("{what} {i}"), problems);
                if !is_string_or_absent(image.get("label")) {
                    problems.push(format!("{what} {i}: label must be a string"));
                }
                image["url"].as_str()
            }
            _ => None,
        };
        let data_uri = url.and_then(|u| u.strip_prefix("data:")).and_then(|u| u.split_once(";base64,"));
        let decodes = data_uri.is_some_and(|(mime, data)| {
            use base64::Engine;
            mime.starts_with("image/") && base64::engine::general_purpose::STANDARD.decode(data).is_ok()
        });
        if !decodes {
            problems.push(format!("{what} {i}: url must be a base64 data URI of an image"));
        }
    }
}

/// Autolab's autoresult: the last line of what the autograder printed.
pub fn autolab(printed: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(last) = printed.lines().last() else { return vec!["nothing printed".into()] };
    let result: Value = match serde_json::from_str(last) {
        Ok(v) => v,
        Err(e) => return vec![format!("the last line is not JSON ({e}): {last}")],
    };
    keys_within(&result, &["scores", "scoreboard"], "the autoresult", &mut problems);
    match result.get("scores").and_then(Value::as_object) {
        Some(scores) if !scores.is_empty() => {
            for (problem, score) in scores {
                if !score.is_number() {
                    problems.push(format!("the score of {problem} must be a number, is {score}"));
                }
            }
        }
        _ => problems.push("scores must assign a score to one or more problems".into()),
    }
    if result.get("scoreboard").is_some_and(|b| !b.is_array()) {
        problems.push("scoreboard must be an array of the columns' values".into());
    }
    problems
}

/// What a CodeRunner combinator template grader prints.
pub fn coderunner(outcome: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let keys = ["fraction", "prologuehtml", "testresults", "epiloguehtml", "showdifferences"];
    keys_within(outcome, &keys, "the outcome", &mut problems);
    number_in(outcome.get("fraction"), 0.0, 1.0, "fraction", &mut problems);
    for key in ["prologuehtml", "epiloguehtml"] {
        if !is_string_or_absent(outcome.get(key)) {
            problems.push(format!("{key} must be a string (HTML)"));
        }
    }
    let Some(rows) = outcome.get("testresults") else { return problems };
    let Some(rows) = rows.as_array().filter(|r| !r.is_empty()) else {
        problems.push("testresults must be a list of rows, the first the headers".into());
        return problems;
    };
    let header: Vec<&str> =
        rows[0].as_array().map(|h| h.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    if header.is_empty() || rows[0].as_array().is_some_and(|h| h.len() != header.len()) {
        problems.push("the first row of testresults is the column headers (strings)".into());
    }
    for (i, row) in rows.iter().enumerate().skip(1) {
        let Some(cells) = row.as_array().filter(|c| c.len() == header.len()) else {
            problems.push(format!("row {i} has not one cell per column"));
            continue;
        };
        for (column, cell) in header.iter().zip(cells) {
            if ["iscorrect", "ishidden"].contains(column) && cell != 0 && cell != 1 {
                problems.push(format!("row {i}: {column} must be 0 or 1, is {cell}"));
            }
        }
    }
    problems
}

/// A GitHub Classroom grader's runner result (decoded from its base64).
pub fn classroom_runner(result: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    if result["version"] != 1 {
        problems.push(format!("version must be 1, is {}", result["version"]));
    }
    one_of(result.get("status"), &["pass", "fail", "error"], "status", &mut problems);
    let max = result["max_score"].as_f64();
    if max.is_none() {
        problems.push("max_score must be a number (the reporter sums it)".into());
    }
    let Some(tests) = result["tests"].as_array() else {
        problems.push("tests must be an array".into());
        return problems;
    };
    let mut total = 0.0;
    for (i, t) in tests.iter().enumerate() {
        let what = format!("test {i}");
        if !t["name"].is_string() {
            problems.push(format!("{what}: name must be a string"));
        }
        one_of(t.get("status"), &["pass", "fail", "error"], &format!("{what}: status"), &mut problems);
        match t["score"].as_f64() {
            Some(score) => total += score,
            None => problems.push(format!("{what}: score must be a number (the reporter sums it)")),
        }
        if !is_string_or_absent(t.get("message")) {
            problems.push(format!("{what}: message must be a string"));
        }
    }
    if max.is_some_and(|max| total > max + 1e-9) {
        problems.push(format!("the tests' scores sum to {total}, over max_score {max:?}"));
    }
    problems
}

/// CodeGrade's JUnit XML: as [`junit`] reads it, but without `<properties>`, which
/// CodeGrade does not support.
pub fn codegrade_junit(xml: &str) -> Result<Vec<Suite>, Vec<String>> {
    junit_of(xml, false)
}
