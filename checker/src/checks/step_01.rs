//! Step 1: the distributed options, typed.
use super::{Check, Finding, Step};
use crate::observe::{Gains, Observation, RunKind};

pub const OPTIONS_LISTED: &str = "options-listed";
pub const OPTIONS_TYPED: &str = "options-typed";

pub const STEP: Step = Step {
    gains: &[Gains::NodeOptions],
    runs: &[RunKind::Options],
    checks: &[
        Check {
            id: OPTIONS_LISTED,
            observes: "`--help`",
            needs: None,
            hint: "three clap options in Args, with default_value_t and a doc comment each (guide: step 1)",
            judge: options_listed,
        },
        Check {
            id: OPTIONS_TYPED,
            observes: "a run with `--num-gpus two`",
            needs: None,
            hint: "declare the options as numbers (usize), so clap rejects other values",
            judge: options_typed,
        },
    ],
};

fn options_listed(obs: &Observation) -> Option<Finding> {
    let text = &obs.options()?.0.stdout;
    let want = [("--num-nodes", "1"), ("--num-gpus", "1"), ("--node-id", "0")];
    let missing: Vec<String> = want
        .iter()
        .filter(|(opt, default)| {
            !text.lines().any(|l| l.contains(opt)) || !help_has_default(text, opt, default)
        })
        .map(|(opt, default)| format!("{opt} (default {default})"))
        .collect();
    Finding::shown(
        missing.is_empty(),
        if missing.is_empty() {
            "all three in --help".into()
        } else {
            format!("--help lacks {}", missing.join(", "))
        },
        "--help lists --num-nodes, --num-gpus and --node-id with defaults 1, 1 and 0",
    )
}

fn options_typed(obs: &Observation) -> Option<Finding> {
    let (_, bad) = obs.options()?;
    let code = bad.status.and_then(|s| s.code());
    Finding::shown(
        // clap's "invalid value" (a typed option), not "unexpected argument" (none).
        code == Some(2) && bad.stderr.contains("invalid value 'two'") && bad.stderr.contains("--num-gpus"),
        format!("`--num-gpus two` gave {}: {}", bad.describe(), bad.stderr.lines().next().unwrap_or("")),
        "exit code 2 and clap's error: invalid value 'two' for '--num-gpus'",
    )
}

fn help_has_default(help: &str, opt: &str, default: &str) -> bool {
    // clap prints `[default: 1]` on the option's line or on its help text's last line.
    let option_line =
        regex::Regex::new(&format!(r"^\s*(-\w, )?{}\b", regex::escape(opt))).expect("valid regex");
    let mut after = false;
    for line in help.lines() {
        if option_line.is_match(line) {
            after = true;
        } else if after && line.trim_start().starts_with('-') {
            return false;
        }
        if after && line.contains(&format!("[default: {default}]")) {
            return true;
        }
    }
    false
}
