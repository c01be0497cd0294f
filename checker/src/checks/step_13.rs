//! Step 13 (beyond the DLI lab): model and pipeline parallelism. With `--pipeline`
//! each rank holds one stage of the model and nothing else, one step through the
//! stages is the uncut model's step, and the pipeline's idle share (the bubble) is
//! measured and reported.
//!
//! The speed of the pipeline is never judged: on a loaded machine a bubble can be any
//! share; what is checked is that it was measured (a share of the steps' time) and set
//! beside GPipe's figure for the schedule that ran.
use std::collections::BTreeMap;
use std::sync::OnceLock;

use lab_trace::event::{EpochReport, FirstStep, PipelineEpoch, PipelineStage, Validation};
use lab_trace::{Record, Trace};

use super::collectives;
use super::{by_rank, malformed, Check, Finding, Step};
use crate::observe::{Gains, Observation, PipelineRuns, RankProcess, RunKind};

pub const OWN_STAGE: &str = "own-stage";
pub const EQUALS_UNCUT: &str = "equals-uncut";
pub const BUBBLE_REPORTED: &str = "bubble-reported";
pub const METRICS_FROM_LAST_STAGE: &str = "metrics-from-last-stage";

pub const STEP: Step = Step {
    gains: &[Gains::Pipeline],
    runs: &[RunKind::Pipeline],
    checks: &[
        Check {
            id: OWN_STAGE,
            observes: "the layers and the parameter count each rank's optimizer holds with --pipeline",
            needs: Some(RunKind::Pipeline),
            hint: "rank r builds only stage r (labkit::WideResNet::stage over the layers labkit::stage_layers gives its rank) on a VarStore of its own, no whole model beside it (guide: step 13)",
            judge: own_stage,
        },
        Check {
            id: EQUALS_UNCUT,
            observes: "the loss and weights after one step through the stages (one micro-batch), against the same step of the uncut model on 1 rank (float values, dropout off)",
            needs: Some(RunKind::Pipeline),
            hint: "every stage starts from the uncut model's weights (WideResNet::stage with the run's settings) and steps its own optimizer once per batch after dist::Pipeline's train_step (guide: step 13)",
            judge: equals_uncut,
        },
        Check {
            id: BUBBLE_REPORTED,
            observes: "each rank's measured idle share per epoch beside GPipe's (S-1)/(M+S-1), and rank 0's printed bubble lines",
            needs: Some(RunKind::Pipeline),
            hint: "train with labkit::train_pipeline (it measures the bubble) and print the Bubble it returns on rank 0 after the epoch line (guide: step 13)",
            judge: bubble_reported,
        },
        Check {
            id: METRICS_FROM_LAST_STAGE,
            observes: "every rank's validation accuracy and loss (held, and printed by rank 0) in the pipeline's runs, against what the last stage measured",
            needs: Some(RunKind::Pipeline),
            hint: "only the last stage gets figures from labkit::test_pipeline: dist::broadcast them from rank world_size - 1 to every rank before the epoch report (guide: step 13)",
            judge: metrics_from_last_stage,
        },
    ],
};

/// Largest difference allowed between the pipeline's first step and the uncut model's:
/// the loss, and each weight value compared.
pub const TOLERANCE: f64 = 1e-5;

/// The finding when a pipeline run never trained because the program refused
/// `--pipeline` itself (the starter, before step 13): the step's work is missing,
/// a failure, not "could not judge".
fn option_missing(runs: &PipelineRuns, expected: &str) -> Option<Option<Finding>> {
    let refused = runs
        .processes()
        .map(|p| &p.ended)
        .find(|e| !e.success() && e.stderr.contains("unexpected argument '--pipeline'"))?;
    Some(Finding::shown(
        false,
        format!("{} refused the option --pipeline: the program has no pipeline yet", refused.name),
        expected,
    ))
}

/// The pipeline's runs, or the finding that stands in for a judgement.
fn runs_or<'o>(obs: &'o Observation, expected: &str) -> Result<&'o PipelineRuns, Option<Finding>> {
    let Some(runs) = obs.pipeline() else {
        return Err(Finding::missing("the pipeline's runs did not run", expected));
    };
    match option_missing(runs, expected) {
        Some(finding) => Err(finding),
        None => Ok(runs),
    }
}

/// The trace's records, or the finding for a malformed one.
fn records(trace: &Trace) -> Result<&[Record], Option<Finding>> {
    trace.checked().map_err(|_| malformed(trace))
}

/// The trainable values of the uncut model the checker's runs train (`--width narrow`).
fn model_parameters() -> i64 {
    static COUNT: OnceLock<i64> = OnceLock::new();
    *COUNT.get_or_init(|| {
        let vs = tch::nn::VarStore::new(tch::Device::Cpu);
        let _ = labkit::WideResNet::new(&vs.root(), labkit::Widths::NARROW, labkit::Norm::BatchNorm);
        labkit::parameter_count(&vs)
    })
}

/// e.g. "stem..block3".
fn span(layers: &[String]) -> String {
    match (layers.first(), layers.last()) {
        (Some(a), Some(b)) if a != b => format!("{a}..{b}"),
        (Some(a), _) => a.clone(),
        _ => "no layer".into(),
    }
}

const OWN_STAGE_EXPECTED: &str = "rank r holds stage r alone: the stages' layers are disjoint and in order, cover the whole model, and the ranks' parameters add up to the uncut model's, no more";

fn own_stage(obs: &Observation) -> Option<Finding> {
    let runs = match runs_or(obs, OWN_STAGE_EXPECTED) {
        Ok(runs) => runs,
        Err(finding) => return finding,
    };
    let trace = match records(&runs.pipelined.trace) {
        Ok(trace) => trace,
        Err(finding) => return finding,
    };
    let stages: BTreeMap<usize, Vec<&PipelineStage>> = by_rank(trace);
    let world = runs.settings.world_size();
    if stages.is_empty() {
        return Finding::missing(
            "no rank said which stage it holds (labkit::train_pipeline records it)",
            OWN_STAGE_EXPECTED,
        );
    }
    let mut layers_in_order = Vec::new();
    let mut total = 0i64;
    let mut described = Vec::new();
    let mut right_ranks = stages.len() == world;
    for (rank, held) in &stages {
        let Some(stage) = held.first() else { continue };
        right_ranks &= stage.stage == *rank && stage.stages == world;
        layers_in_order.extend(stage.layers.iter().cloned());
        total += stage.parameters;
        described.push(format!("rank {rank}: {} ({} values)", span(&stage.layers), stage.parameters));
    }
    let model = model_parameters();
    let whole: Vec<String> = labkit::model::LAYERS.iter().map(|l| l.to_string()).collect();
    let observed = format!("{}; together {total} values of the uncut model's {model}", described.join(", "));
    Finding::shown(right_ranks && layers_in_order == whole && total == model, observed, OWN_STAGE_EXPECTED)
}

const EQUALS_UNCUT_EXPECTED: &str =
    "one step through the stages gives the uncut model's loss and weights, each within 1e-5";

/// The first step of each rank of a trace, by rank.
fn first_steps(trace: &[Record]) -> BTreeMap<usize, &FirstStep> {
    by_rank::<FirstStep>(trace)
        .into_iter()
        .filter_map(|(rank, steps)| Some((rank, *steps.first()?)))
        .collect()
}

fn equals_uncut(obs: &Observation) -> Option<Finding> {
    let runs = match runs_or(obs, EQUALS_UNCUT_EXPECTED) {
        Ok(runs) => runs,
        Err(finding) => return finding,
    };
    let (cut, uncut) = match (records(&runs.cut.trace), records(&runs.uncut.trace)) {
        (Ok(cut), Ok(uncut)) => (first_steps(cut), first_steps(uncut)),
        (Err(finding), _) | (_, Err(finding)) => return finding,
    };
    let Some(reference) = uncut.get(&0) else {
        return Finding::missing("the uncut model's run recorded no first step", EQUALS_UNCUT_EXPECTED);
    };
    let world = runs.step_settings.world_size();
    if cut.len() != world {
        return Finding::missing(
            format!("{} of the {world} stages recorded their first step", cut.len()),
            EQUALS_UNCUT_EXPECTED,
        );
    }
    // The stages' parameters in stage order are the uncut model's, in its order.
    let stages: Vec<_> = cut.values().flat_map(|s| s.parameters.iter()).collect();
    let last_loss = cut.get(&(world - 1)).and_then(|s| s.loss);
    let mut worst = 0f64;
    let mut shapes_agree = stages.len() == reference.parameters.len();
    for (mine, theirs) in stages.iter().zip(&reference.parameters) {
        shapes_agree &= mine.shape == theirs.shape && mine.samples.len() == theirs.samples.len();
        worst = worst.max((mine.norm - theirs.norm).abs());
        for (a, b) in mine.samples.iter().zip(&theirs.samples) {
            worst = worst.max((a - b).abs());
        }
    }
    let loss_diff = match (last_loss, reference.loss) {
        (Some(a), Some(b)) => (a - b).abs(),
        _ => f64::NAN,
    };
    let loss = |l: Option<f64>| l.map_or("none".to_string(), |l| format!("{l:.6}"));
    let observed = format!(
        "loss {} on the last stage, {} uncut; {} parameter tensors over {world} stages against the uncut model's {}, largest weight difference {worst:.1e}",
        loss(last_loss),
        loss(reference.loss),
        stages.len(),
        reference.parameters.len()
    );
    let ok = shapes_agree && loss_diff <= TOLERANCE && worst <= TOLERANCE;
    Finding::shown(ok, observed, EQUALS_UNCUT_EXPECTED)
}

const BUBBLE_EXPECTED: &str = "every rank measures its idle share each epoch (in [0, 1), beside GPipe's (S-1)/(M+S-1) for the stages and micro-batches that ran) and rank 0 prints it";

/// The processes' standard output, every line.
fn stdout_lines(processes: &[RankProcess]) -> Vec<&str> {
    processes.iter().flat_map(|p| p.ended.stdout.lines()).collect()
}

fn bubble_reported(obs: &Observation) -> Option<Finding> {
    let runs = match runs_or(obs, BUBBLE_EXPECTED) {
        Ok(runs) => runs,
        Err(finding) => return finding,
    };
    let trace = match records(&runs.pipelined.trace) {
        Ok(trace) => trace,
        Err(finding) => return finding,
    };
    let epochs: BTreeMap<usize, Vec<&PipelineEpoch>> = by_rank(trace);
    if epochs.is_empty() {
        return Finding::missing(
            "no rank measured its bubble (labkit::train_pipeline records it)",
            BUBBLE_EXPECTED,
        );
    }
    let (stages, m) = (runs.settings.world_size(), runs.micro_batches);
    let ideal = (stages - 1) as f64 / (m + stages - 1) as f64;
    let mut wrong = Vec::new();
    let mut measured = Vec::new();
    for (rank, per_epoch) in &epochs {
        for e in per_epoch {
            let schedule =
                e.stages == stages && e.micro_batches == m && (e.ideal_bubble - ideal).abs() < 1e-12;
            let share = e.bubble.is_finite() && (0.0..1.0).contains(&e.bubble) && e.steps > 0;
            let consistent = e.busy <= e.total && (e.bubble - (1.0 - e.busy / e.total)).abs() < 1e-9;
            if !(schedule && share && consistent) {
                wrong.push(format!(
                    "rank {rank} epoch {}: bubble {:.3} over {} step(s), {} stages x {} micro-batches, ideal {:.3}",
                    e.epoch, e.bubble, e.steps, e.stages, e.micro_batches, e.ideal_bubble
                ));
            }
            measured.push(format!("{:.0}%", 100.0 * e.bubble));
        }
    }
    let ranks_measured = epochs.len() == stages;
    let printed =
        stdout_lines(&runs.pipelined.processes).iter().filter(|l| l.starts_with("Pipeline: ")).count();
    let trained_epochs = epochs.values().map(Vec::len).max().unwrap_or(0);
    let observed = format!(
        "{} rank(s) measured bubbles {} ({stages} stages x {m} micro-batches: GPipe's {:.0}%); {printed} bubble line(s) printed for {trained_epochs} epoch(s){}",
        epochs.len(),
        measured.join(", "),
        100.0 * ideal,
        if wrong.is_empty() { String::new() } else { format!("; inconsistent: {}", wrong.join("; ")) }
    );
    Finding::shown(ranks_measured && wrong.is_empty() && printed == trained_epochs, observed, BUBBLE_EXPECTED)
}

const METRICS_FROM_LAST_STAGE_EXPECTED: &str = "in every epoch every rank holds, and rank 0 prints, the validation accuracy and loss the last stage measured (labkit::test_pipeline's, broadcast from it)";

/// What one pipeline run's ranks held and printed against what its last stage
/// measured: the differences, and the epochs compared; `None` when the last stage
/// measured nothing or not every rank reported.
fn metrics_against_last_stage(
    name: &str,
    trace: &[Record],
    processes: &[RankProcess],
    world: usize,
) -> Option<(Vec<String>, usize)> {
    let last = world.checked_sub(1)?;
    // labkit::test_pipeline records the last stage's measurement, one per epoch.
    let measured: Vec<&Validation> = by_rank::<Validation>(trace).remove(&last)?;
    let reports: BTreeMap<usize, Vec<&EpochReport>> = by_rank(trace);
    if measured.is_empty() || reports.len() != world {
        return None;
    }
    let mut off = Vec::new();
    for (rank, held) in &reports {
        for report in held {
            let Some(m) = measured.get(report.epoch) else { continue };
            let (a, l) = (report.validation_accuracy, report.validation_loss);
            // A NaN on either side is a difference too.
            if !((a - m.accuracy).abs() <= 1e-9 && (l - m.loss).abs() <= 1e-9) {
                off.push(format!(
                    "{name} run, rank {rank} epoch {}: holds accuracy {a:.4}, loss {l:.4}; the last stage (rank {last}) measured {:.4}, {:.4}",
                    report.epoch, m.accuracy, m.loss
                ));
            }
        }
    }
    // What a student reads: the epoch lines, to the digits they print.
    let printed = stdout_lines(processes).into_iter().filter_map(labkit::EpochReport::parse);
    for line in printed {
        let Some(m) = measured.get(line.epoch) else { continue };
        let shown = |x: f64| format!("{x:5.3}");
        if shown(line.validation_accuracy) != shown(m.accuracy)
            || shown(line.validation_loss) != shown(m.loss)
        {
            off.push(format!(
                "{name} run, epoch {}: printed accuracy {:.3}, loss {:.3}; the last stage (rank {last}) measured {:.3}, {:.3}",
                line.epoch, line.validation_accuracy, line.validation_loss, m.accuracy, m.loss
            ));
        }
    }
    Some((off, measured.len()))
}

fn metrics_from_last_stage(obs: &Observation) -> Option<Finding> {
    let expected = METRICS_FROM_LAST_STAGE_EXPECTED;
    if let Some(mine) = collectives::owned(obs, RunKind::Pipeline, METRICS_FROM_LAST_STAGE, expected) {
        return Some(mine);
    }
    let runs = match runs_or(obs, expected) {
        Ok(runs) => runs,
        Err(finding) => return finding,
    };
    let world = runs.settings.world_size();
    let mut off = Vec::new();
    let mut epochs = 0;
    for (name, run) in [("pipelined", &runs.pipelined), ("one-step", &runs.cut)] {
        let trace = match records(&run.trace) {
            Ok(trace) => trace,
            Err(finding) => return finding,
        };
        let Some((differences, compared)) = metrics_against_last_stage(name, trace, &run.processes, world)
        else {
            return Finding::missing(
                format!("the {name} run: no validation measured by the last stage (labkit::test_pipeline records it), or epoch reports from fewer than {world} ranks"),
                expected,
            );
        };
        off.extend(differences);
        epochs += compared;
    }
    Finding::shown(
        off.is_empty(),
        if off.is_empty() {
            format!("every rank held, and rank 0 printed, the last stage's measurement ({epochs} epoch(s) over both runs)")
        } else {
            off.join("; ")
        },
        expected,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::Evidence;

    fn solution_13() -> Observation {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/observations/solution-13/observation.json");
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    fn pipeline_mut(obs: &mut Observation) -> &mut PipelineRuns {
        match obs.run_mut(RunKind::Pipeline) {
            Some(crate::observe::Runs::Pipeline(runs)) => runs,
            _ => panic!("solution-13 recorded the pipeline's runs"),
        }
    }

    /// A program that reports figures no stage measured: rank 0 holds the zeros its
    /// own `test_pipeline` left it (no broadcast from the last stage).
    #[test]
    fn metrics_no_stage_measured_break_it() {
        let mut obs = solution_13();
        let holds = metrics_from_last_stage(&obs).unwrap();
        assert_eq!(holds.evidence, Evidence::Holds, "{}", holds.observed);
        let runs = pipeline_mut(&mut obs);
        for record in runs.pipelined.trace.records.iter_mut().filter(|r| r.rank == Some(0)) {
            if let lab_trace::Event::EpochReport(report) = &mut record.event {
                (report.validation_accuracy, report.validation_loss) = (0.0, 0.0);
            }
        }
        let broken = metrics_from_last_stage(&obs).unwrap();
        assert_eq!(broken.evidence, Evidence::Broken);
        assert!(
            broken.observed.starts_with("pipelined run, rank 0 epoch 0: holds accuracy 0.0000, loss 0.0000; the last stage (rank 5) measured 0.0962, 2.3364"),
            "{}",
            broken.observed
        );
        // What rank 0 printed is read too.
        let mut obs = solution_13();
        let rank0 = &mut pipeline_mut(&mut obs).pipelined.processes[0].ended;
        rank0.stdout = rank0.stdout.replace("Validation Accuracy = 0.096", "Validation Accuracy = 0.000");
        let broken = metrics_from_last_stage(&obs).unwrap();
        assert_eq!(broken.evidence, Evidence::Broken);
        assert!(
            broken.observed.contains("pipelined run, epoch 0: printed accuracy 0.000, loss 2.336"),
            "{}",
            broken.observed
        );
    }
}
