//! Every mistake a step page lists under "## Common mistakes" is a broken variant of the
//! lab (tests/common/variants.rs) whose recorded run fails a check of that step: no
//! listed mistake grades full marks (issue 48). Each bullet names its variants in an
//! HTML comment, invisible in the book:
//!
//! ```text
//! - Dividing by `args.num_gpus` ... <!-- variant: metrics-divided-by-num-gpus -->
//! - ... <!-- variant: no-epoch-barrier, barrier-after-elapsed; fails: epoch-barrier -->
//! - ... <!-- variant: rank-is-local-rank; again: the same mistake seen from step 6 -->
//! ```
//!
//! `fails:` names the check that must be among the failures, when it is not one of the
//! bullet's own step (a mistake that stops the run fails step 0's `trains`, a world size
//! lost in step 10 step 4's `global-rank`): any check `verify step N` judges. Without
//! it, a check of the bullet's step, or `builds` (a mistake that does not compile). A variant
//! named by an earlier bullet too says why (`again:`). Bullets under the page's
//! "### On GPU nodes" are exempt: no machine that records the fixtures has a GPU.
use std::collections::BTreeMap;

use super::fixtures::{case, cases, Case};
use super::{all_checks, CheckResult};

/// The part of "## Common mistakes" whose mistakes only GPU ranks can make.
const GPU_PART: &str = "### On GPU nodes";
const SECTION: &str = "## Common mistakes";

/// One bullet of a "Common mistakes" section.
#[derive(Debug)]
struct Bullet {
    step: u8,
    /// Its first line, for messages.
    first: String,
    /// Under [`GPU_PART`].
    gpu_only: bool,
    /// What its `<!-- variant: ... -->` says, if it has one (or why it cannot be read).
    marker: Option<Result<Marker, String>>,
}

#[derive(Debug)]
struct Marker {
    variants: Vec<String>,
    fails: Option<String>,
    again: Option<String>,
}

/// The bullets of the "Common mistakes" section of step `step`'s page `page`.
fn bullets(step: u8, page: &str) -> Result<Vec<Bullet>, String> {
    let mut out: Vec<(Bullet, String)> = Vec::new();
    let (mut inside, mut found, mut gpu_only, mut in_fence) = (false, false, false, false);
    for line in page.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
        }
        if in_fence {
            if let Some((_, text)) = out.last_mut().filter(|_| inside) {
                text.push('\n');
                text.push_str(line);
            }
            continue;
        }
        if line.starts_with("# ") || line.starts_with("## ") {
            inside = line.trim_end() == SECTION;
            found |= inside;
            gpu_only = false;
            continue;
        }
        if !inside {
            continue;
        }
        if line.starts_with("### ") {
            gpu_only = line.trim_end() == GPU_PART;
        } else if let Some(rest) = line.strip_prefix("- ") {
            let bullet = Bullet { step, first: rest.trim().to_string(), gpu_only, marker: None };
            out.push((bullet, rest.to_string()));
        } else if line.starts_with(' ') && !line.trim().is_empty() {
            if let Some((_, text)) = out.last_mut() {
                text.push('\n');
                text.push_str(line);
            }
        }
    }
    if !found {
        return Err(format!("step {step}'s page has no \"{SECTION}\" section"));
    }
    Ok(out
        .into_iter()
        .map(|(mut bullet, text)| {
            bullet.marker = marker(&text);
            bullet
        })
        .collect())
}

/// The bullet's `<!-- variant: ... -->`, if it has one; an error for two, or for one
/// that does not read.
fn marker(text: &str) -> Option<Result<Marker, String>> {
    let comments: Vec<&str> = text
        .split("<!--")
        .skip(1)
        .filter_map(|c| c.split_once("-->").map(|(c, _)| c.trim()))
        .filter(|c| c.starts_with("variant"))
        .collect();
    match comments.as_slice() {
        [] => None,
        [one] => Some(parse_marker(one)),
        _ => Some(Err("more than one `<!-- variant: ... -->`".into())),
    }
}

fn parse_marker(comment: &str) -> Result<Marker, String> {
    let mut marker = Marker { variants: Vec::new(), fails: None, again: None };
    for part in comment.split(';').map(str::trim) {
        let (key, value) = part.split_once(':').ok_or_else(|| format!("`{part}`: `key: value` expected"))?;
        let value = value.trim();
        match key.trim() {
            "variant" => marker.variants = value.split(',').map(|v| v.trim().to_string()).collect(),
            "fails" => marker.fails = Some(value.to_string()),
            "again" => marker.again = Some(value.to_string()),
            other => return Err(format!("`{other}:`: only `variant:`, `fails:` and `again:` are known")),
        }
    }
    if marker.variants.is_empty() || marker.variants.iter().any(|v| v.is_empty()) {
        return Err(format!("`{comment}`: no variant named"));
    }
    Ok(marker)
}

/// A recorded variant: the step it was recorded at and its checks' verdicts.
struct Recorded {
    step: u8,
    results: Vec<CheckResult>,
}

/// Whatever is wrong with the bullets of `pages` (step, page text), judged against the
/// recorded variants `variants` gives by name.
fn problems(pages: &[(u8, String)], variants: &dyn Fn(&str) -> Option<Recorded>) -> Vec<String> {
    let mut out = Vec::new();
    let mut named: BTreeMap<String, String> = BTreeMap::new();
    for (step, page) in pages {
        let bullets = match bullets(*step, page) {
            Ok(b) => b,
            Err(e) => {
                out.push(e);
                continue;
            }
        };
        if bullets.iter().all(|b| b.gpu_only) {
            out.push(format!("step {step}: \"{SECTION}\" lists no mistake outside \"{GPU_PART}\""));
        }
        for bullet in bullets {
            out.extend(bullet_problems(&bullet, variants, &mut named).into_iter().map(|p| {
                let first: String = bullet.first.chars().take(60).collect();
                format!("step {step}, \"{first}…\": {p}")
            }));
        }
    }
    out
}

fn bullet_problems(
    bullet: &Bullet,
    variants: &dyn Fn(&str) -> Option<Recorded>,
    named: &mut BTreeMap<String, String>,
) -> Vec<String> {
    let marker = match (&bullet.marker, bullet.gpu_only) {
        (None, true) => return Vec::new(),
        (Some(_), true) => {
            return vec![format!("under \"{GPU_PART}\", yet it names a variant: move it out of that part")]
        }
        (None, false) => {
            return vec!["names no variant (`<!-- variant: NAME -->`): write its broken variant \
                 (tests/common/variants.rs) and record it, or move the bullet out of the mistakes"
                .into()]
        }
        (Some(Err(e)), false) => return vec![e.clone()],
        (Some(Ok(m)), false) => m,
    };
    let step_ids: Vec<&str> = super::ids(bullet.step);
    if let Some(check) = &marker.fails {
        // A check that `verify step N` judges: one of steps 0..=N, or the build.
        let judged = all_checks().any(|(step, c)| step <= bullet.step && c.id == check);
        if !judged && check != super::step_00::BUILDS {
            return vec![format!(
                "`fails: {check}` is not a check that `verify step {}` judges",
                bullet.step
            )];
        }
    }
    let mut out = Vec::new();
    if marker.again.is_some() && !marker.variants.iter().any(|v| named.contains_key(v)) {
        out.push("`again:`, yet no earlier bullet names its variants".to_string());
    }
    for name in &marker.variants {
        if let Some(first) = named.get(name) {
            if marker.again.is_none() {
                out.push(format!("variant `{name}` is named by \"{first}…\" too: say why (`again: ...`)"));
            }
        } else {
            named.insert(name.clone(), bullet.first.chars().take(40).collect());
        }
        let Some(recorded) = variants(name) else {
            out.push(format!(
                "no recorded variant `{name}` (checker/fixtures/observations/step-NN-{name}): \
                 write it in tests/common/variants.rs and record it (tests/record_fixtures.rs)"
            ));
            continue;
        };
        if recorded.step < bullet.step {
            out.push(format!(
                "variant `{name}` was recorded at step {}, before the bullet's step {}: its checks were not run",
                recorded.step, bullet.step
            ));
            continue;
        }
        let failed: Vec<&str> = recorded.results.iter().filter(|r| r.failed()).map(|r| r.id).collect();
        let caught = match &marker.fails {
            Some(check) => failed.contains(&check.as_str()),
            None => failed.iter().any(|id| step_ids.contains(id) || *id == super::step_00::BUILDS),
        };
        if !caught {
            let wanted = match &marker.fails {
                Some(check) => format!("`{check}`"),
                None => format!("a check of step {} or `builds`", bullet.step),
            };
            out.push(format!("variant `{name}` fails {failed:?}, not {wanted}"));
        }
    }
    out
}

/// The recorded variants among `cases`, by name (`step-08-reduce-max` is variant
/// `reduce-max` of step 8). A mistake also recorded in a later step's program (the
/// finished lab's `step-11-…` copies of the world's mistakes) is judged by its own
/// step's recording, the earliest.
fn recorded_variants(cases: Vec<Case>) -> BTreeMap<String, Case> {
    let mut by_name: BTreeMap<String, (u8, Case)> = BTreeMap::new();
    for case in cases {
        let Some((step, name)) = case.name.strip_prefix("step-").and_then(|rest| rest.split_once('-')) else {
            continue;
        };
        let (Ok(step), name) = (step.parse::<u8>(), name.to_string()) else { continue };
        match by_name.get(&name) {
            Some((earlier, _)) if *earlier <= step => {}
            _ => {
                by_name.insert(name, (step, case));
            }
        }
    }
    by_name.into_iter().map(|(name, (_, case))| (name, case)).collect()
}

fn pages() -> Vec<(u8, String)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    (0..=lab_course::LAST_STEP)
        .map(|step| {
            let path = root.join(lab_course::guide_page(step));
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (step, text)
        })
        .collect()
}

fn lookup(recorded: &BTreeMap<String, Case>) -> impl Fn(&str) -> Option<Recorded> + '_ {
    |name| {
        let case = recorded.get(name)?;
        // `step-08-reduce-max`: recorded with `verify step 8`.
        let step = case.name.get(5..7)?.parse().ok()?;
        Some(Recorded { step, results: case.recorded.judge() })
    }
}

#[test]
fn every_listed_mistake_is_a_recorded_variant_that_fails_its_step() {
    let recorded = recorded_variants(cases());
    let found = problems(&pages(), &lookup(&recorded));
    assert!(
        found.is_empty(),
        "the guide's \"Common mistakes\" and the recorded variants disagree:\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn the_guide_lists_dozens_of_mistakes_with_their_variants() {
    let pages = pages();
    let bullets: Vec<Bullet> = pages.iter().flat_map(|(s, p)| bullets(*s, p).unwrap()).collect();
    let marked = bullets.iter().filter(|b| matches!(b.marker, Some(Ok(_)))).count();
    assert!(marked >= 40, "only {marked} bullets name a variant: {bullets:?}");
}

/// The rules themselves, on pages written here and on real fixtures: a bullet without a
/// variant, an unknown variant, one whose run passes, one recorded too early, a wrong
/// `fails:` and a variant named twice are each reported; GPU-only bullets are not.
#[test]
fn what_the_rules_catch() {
    // Only the cases it names: reading every recording is the other test's cost.
    let named = ["step-09-metrics-summed", "step-04-rank-is-local-rank"];
    let recorded = recorded_variants(named.iter().map(|n| case(n.to_string())).collect());
    let real = lookup(&recorded);
    let solution = case("solution-09".into());
    let variants = |name: &str| match name {
        "passes" => Some(Recorded { step: 9, results: solution.recorded.judge() }),
        other => real(other),
    };
    let page = |bullets: &str| {
        vec![(9u8, format!("# Step 9\n\n{SECTION}\n\n{bullets}\n## Next\n\n- not a mistake\n"))]
    };
    let one = |bullets: &str| problems(&page(bullets), &variants);

    assert_eq!(one("- Summing. <!-- variant: metrics-summed -->\n"), Vec::<String>::new());
    assert_eq!(
        one("- Summing,\n  not averaging.\n  <!-- variant: metrics-summed; fails: metrics-averaged -->\n"),
        Vec::<String>::new()
    );
    let gpu =
        format!("- Summing. <!-- variant: metrics-summed -->\n\n{GPU_PART}\n\n- A CPU tensor on NCCL.\n");
    assert_eq!(one(&gpu), Vec::<String>::new());

    let expect = |bullets: &str, words: &str| {
        let found = one(bullets);
        assert!(found.iter().any(|p| p.contains(words)), "{bullets:?}: {found:?}, expected {words:?}");
    };
    expect("- Summing.\n", "names no variant");
    expect("- Summing. <!-- variant: no-such-variant -->\n", "no recorded variant `no-such-variant`");
    expect("- Nothing wrong. <!-- variant: passes -->\n", "variant `passes` fails [], not a check of step 9");
    expect(
        "- Too early. <!-- variant: rank-is-local-rank -->\n",
        "recorded at step 4, before the bullet's step 9",
    );
    expect("- Summing. <!-- variant: metrics-summed; fails: trains -->\n", "not `trains`");
    expect(
        "- Summing. <!-- variant: metrics-summed; fails: own-stage -->\n",
        "not a check that `verify step 9` judges",
    );
    expect(
        "- Summing. <!-- variant: metrics-summed -->\n- Again. <!-- variant: metrics-summed -->\n",
        "named by \"Summing.",
    );
    assert_eq!(
        one("- Summing. <!-- variant: metrics-summed -->\n- Again. <!-- variant: metrics-summed; again: seen twice -->\n"),
        Vec::<String>::new()
    );
    expect("- Summing. <!-- variant: metrics-summed; again: why not -->\n", "no earlier bullet names");
    expect(
        &format!("{GPU_PART}\n\n- On GPU. <!-- variant: metrics-summed -->\n"),
        "under \"### On GPU nodes\"",
    );
    expect("- Summing. <!-- variant: metrics-summed; why: no -->\n", "`why:`");
    // Only that part is exempt: another subsection's bullets still need their variant.
    expect("### On CPU nodes\n\n- Summing.\n", "names no variant");
    expect(&format!("{GPU_PART}\n\n- A CPU tensor on NCCL.\n"), "lists no mistake outside");
    assert!(problems(&[(9, "# Step 9\n".into())], &variants)[0].contains("no \"## Common mistakes\" section"));
}
