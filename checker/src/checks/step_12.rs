//! Step 12 (beyond the DLI lab): checkpoint and resume. Rank 0 alone writes, no rank
//! reads before the checkpoint is whole, and a run stopped after an epoch and resumed
//! ends with the weights of a run never stopped.
//!
//! Where each rank loads the checkpoint to (PyTorch's `map_location`) is judged where
//! it can show, on ranks that compute on GPUs (`device-mapping`). On CPU every rank's
//! device is the CPU, so a missing mapping cannot show there: the check does not apply
//! and is left out of the report rather than passed (a pass would claim what was not
//! seen) or left "could not judge" (which grades as a failure: every student of a class
//! graded on CPUs would lose it).
use std::collections::BTreeSet;

use lab_trace::event::{
    CheckpointLoaded, CheckpointSaved, LoadCheckpoint, SaveCheckpoint, TrainIndices, Weights,
};
use lab_trace::Record;

use super::collectives;
use super::{events, malformed, set, Check, Finding, Step};
use crate::observe::{Gains, Observation, RunKind};

pub const ONE_WRITER: &str = "one-writer";
pub const READ_AFTER_WHOLE: &str = "read-after-whole";
pub const RESUME_EQUALS_UNINTERRUPTED: &str = "resume-equals-uninterrupted";
pub const DEVICE_MAPPING: &str = "device-mapping";

pub const STEP: Step = Step {
    gains: &[Gains::Checkpoints, Gains::Momentum],
    runs: &[RunKind::Resume],
    checks: &[
        Check {
            id: ONE_WRITER,
            observes: "who writes the checkpoint after each epoch (--save-every 1)",
            needs: Some(RunKind::Main),
            hint: "every rank holds the same weights: only global rank 0 calls labkit::write_checkpoint (guide: step 12)",
            judge: one_writer,
        },
        Check {
            id: READ_AFTER_WHOLE,
            observes: "when each rank begins loading the checkpoint, against when rank 0's write finished (writing made 1 s late)",
            needs: Some(RunKind::Main),
            hint: "a dist::barrier() between rank 0's write and every rank's labkit::load_checkpoint (guide: step 12)",
            judge: read_after_whole,
        },
        Check {
            id: RESUME_EQUALS_UNINTERRUPTED,
            observes: "a run stopped after epoch 0 and resumed with --resume, against the same run never stopped (weight digests, dropout off)",
            needs: Some(RunKind::Resume),
            hint: "with --resume, every rank loads the checkpoint (labkit::load_checkpoint) and the loop starts at labkit::resume_after's epoch (guide: step 12)",
            judge: resume_equals_uninterrupted,
        },
        Check {
            id: DEVICE_MAPPING,
            observes: "the device each rank loads the checkpoint onto (map_location) against its model's, where the ranks compute on GPUs (left out on CPU, where every device is the CPU)",
            needs: Some(RunKind::Main),
            hint: "load onto the device this rank trains on, not a fixed one, as PyTorch's map_location={'cuda:0': f'cuda:{local_rank}'} does (guide: step 12)",
            judge: device_mapping,
        },
    ],
};

/// "rank 1 (local rank 1)", or what the record says of who wrote it.
fn who(record: &Record) -> String {
    match (record.rank, record.local_rank) {
        (Some(rank), _) => format!("rank {rank}"),
        (None, Some(local)) => format!("local rank {local}"),
        (None, None) => format!("process {}", record.pid),
    }
}

const ONE_WRITER_EXPECTED: &str = "global rank 0, and only it, writes the checkpoint after each epoch";

fn one_writer(obs: &Observation) -> Option<Finding> {
    let Ok(trace) = obs.main.trace.checked() else { return malformed(&obs.main.trace) };
    let writes = events::<SaveCheckpoint>(trace);
    if writes.is_empty() {
        return Finding::missing(
            "no rank wrote a checkpoint (--save-every 1 was given)",
            ONE_WRITER_EXPECTED,
        );
    }
    let writers: BTreeSet<Option<usize>> = writes.iter().map(|(r, _)| r.rank).collect();
    let epochs: BTreeSet<usize> = writes.iter().map(|(_, w)| w.epoch).collect();
    let observed = format!(
        "{} write(s) of epochs {}, by {}",
        writes.len(),
        set(&epochs),
        writes
            .iter()
            .map(|(r, _)| who(r))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
            .join(", ")
    );
    let every_epoch = epochs.len() == obs.variation.epochs;
    if writers == BTreeSet::from([Some(0)]) && !every_epoch {
        // Rank 0 alone wrote, but not after every epoch: the run ended early (when it
        // failed, for another reason: "could not judge").
        return Finding::missing(observed, ONE_WRITER_EXPECTED);
    }
    Finding::shown(writers == BTreeSet::from([Some(0)]) && every_epoch, observed, ONE_WRITER_EXPECTED)
}

const READ_AFTER_WHOLE_EXPECTED: &str =
    "every rank begins loading the checkpoint after rank 0 has finished writing it (the barrier)";

/// Every read against the writes begun before it: each must have finished (its
/// `checkpoint_saved`) before the read began, and at least one must have.
fn read_after_whole(obs: &Observation) -> Option<Finding> {
    if let Some(mine) = collectives::owned(obs, RunKind::Main, READ_AFTER_WHOLE, READ_AFTER_WHOLE_EXPECTED) {
        return Some(mine);
    }
    let Ok(trace) = obs.main.trace.checked() else { return malformed(&obs.main.trace) };
    let reads = events::<LoadCheckpoint>(trace);
    if reads.is_empty() {
        return Finding::missing(
            "no rank loaded the checkpoint after it was written",
            READ_AFTER_WHOLE_EXPECTED,
        );
    }
    let start = trace.first().map_or(0.0, |r| r.time);
    // Each write's start and, once whole, its finish (the same process's next
    // `checkpoint_saved`).
    let mut writes: Vec<(u32, usize, f64, Option<f64>)> = Vec::new();
    for record in trace {
        if let Some(save) = record.get::<SaveCheckpoint>() {
            writes.push((record.pid, save.epoch, record.time, None));
        } else if let Some(saved) = record.get::<CheckpointSaved>() {
            if let Some(w) =
                writes.iter_mut().find(|w| w.0 == record.pid && w.1 == saved.epoch && w.3.is_none())
            {
                w.3 = Some(record.time);
            }
        }
    }
    let mut early = Vec::new();
    for (record, _) in &reads {
        let began = record.time;
        let begun_before: Vec<_> = writes.iter().filter(|w| w.2 <= began).collect();
        if begun_before.is_empty() {
            early.push(format!(
                "{} began loading at {:.2} s, before any checkpoint was written",
                who(record),
                began - start
            ));
        } else if let Some(w) = begun_before.iter().find(|w| w.3.is_none_or(|done| done > began)) {
            let finished = match w.3 {
                Some(done) => format!("finished {:.2} s later", done - began),
                None => "never finished".into(),
            };
            early.push(format!(
                "{} began loading at {:.2} s while epoch {}'s checkpoint was being written ({finished})",
                who(record),
                began - start,
                w.1
            ));
        }
    }
    // Every rank continues from what was saved: each decides to load after every epoch
    // written, not only the ranks that happen to (a decision the ranks must take alike).
    let written: BTreeSet<usize> = writes.iter().map(|w| w.1).collect();
    let skipped: Vec<String> = (0..obs.variation.world_size())
        .filter_map(|rank| {
            let loads = reads.iter().filter(|(r, _)| r.rank == Some(rank)).count();
            (loads < written.len())
                .then(|| format!("rank {rank} loaded {loads} of the {} checkpoint(s) written", written.len()))
        })
        .collect();
    if early.is_empty() && !skipped.is_empty() {
        let observed = skipped.join("; ");
        let whole_run = obs.main.processes.iter().all(|p| p.ended.success());
        // A rank that died before its load decided nothing: "could not judge".
        return if whole_run {
            Finding::shown(false, observed, READ_AFTER_WHOLE_EXPECTED)
        } else {
            Finding::missing(observed, READ_AFTER_WHOLE_EXPECTED)
        };
    }
    if early.is_empty() {
        let observed = format!("all {} load(s) began after the checkpoint was whole", reads.len());
        Finding::shown(true, observed, READ_AFTER_WHOLE_EXPECTED)
    } else {
        Finding::shown(false, early.join("; "), READ_AFTER_WHOLE_EXPECTED)
    }
}

const RESUME_EXPECTED: &str =
    "the resumed run trains only the epochs after the checkpoint and ends with the uninterrupted run's weights, bit for bit";

fn resume_equals_uninterrupted(obs: &Observation) -> Option<Finding> {
    let Some(runs) = obs.resume() else {
        return Finding::missing("the stopped and resumed runs did not run", RESUME_EXPECTED);
    };
    let (Ok(whole), Ok(resumed)) = (runs.uninterrupted.trace.checked(), runs.resumed.trace.checked()) else {
        let bad = if runs.uninterrupted.trace.checked().is_err() {
            &runs.uninterrupted.trace
        } else {
            &runs.resumed.trace
        };
        return malformed(bad);
    };
    let last = runs.settings.epochs - 1;
    let final_digest = |trace: &[Record]| {
        events::<Weights>(trace)
            .into_iter()
            .find(|(r, w)| r.rank == Some(0) && w.epoch == last)
            .map(|(_, w)| w.digest.clone())
    };
    let Some(expected_digest) = final_digest(whole) else {
        return Finding::missing(
            format!("the uninterrupted run left no weights after epoch {last}"),
            RESUME_EXPECTED,
        );
    };
    let trained_by = |rank: usize| -> BTreeSet<usize> {
        events::<TrainIndices>(resumed)
            .into_iter()
            .filter(|(r, _)| r.rank == Some(rank))
            .map(|(_, t)| t.epoch)
            .collect()
    };
    let loaded_by = |rank: usize| {
        events::<CheckpointLoaded>(resumed).into_iter().filter(|(r, _)| r.rank == Some(rank)).count()
    };
    let (trained, loaded) = (trained_by(0), loaded_by(0));
    // Every rank must take rank 0's decisions, to load and where to start: what each
    // one did, not only rank 0 (whose weights are compared).
    let apart: Vec<String> = (1..runs.settings.world_size())
        .filter(|&rank| trained_by(rank) != trained || (loaded_by(rank) > 0) != (loaded > 0))
        .map(|rank| {
            format!(
                "rank {rank} loaded {} checkpoint(s) and trained epochs {}",
                loaded_by(rank),
                set(&trained_by(rank))
            )
        })
        .collect();
    let Some(digest) = final_digest(resumed) else {
        return Finding::missing(
            format!("the resumed run left no weights after epoch {last}"),
            RESUME_EXPECTED,
        );
    };
    let continued = trained == (runs.stopped_after + 1..=last).collect::<BTreeSet<_>>();
    let mut observed = format!(
        "stopped after epoch {}; the resumed run loaded {loaded} checkpoint(s) on rank 0, trained epochs {}, ended with weights {digest} (uninterrupted: {expected_digest})",
        runs.stopped_after,
        set(&trained)
    );
    if !apart.is_empty() {
        observed.push_str(&format!("; but {}", apart.join(", ")));
    }
    Finding::shown(
        continued && loaded > 0 && apart.is_empty() && digest == expected_digest,
        observed,
        RESUME_EXPECTED,
    )
}

const DEVICE_MAPPING_EXPECTED: &str =
    "every rank loads the checkpoint onto its own device, the one its model is on (PyTorch's map_location)";

/// `None` (does not apply) when no rank loaded onto a GPU model: on the CPU a mapping
/// cannot show, and a run without loads is `read-after-whole`'s to report.
fn device_mapping(obs: &Observation) -> Option<Finding> {
    let Ok(trace) = obs.main.trace.checked() else { return malformed(&obs.main.trace) };
    let loads = events::<LoadCheckpoint>(trace);
    if loads.iter().all(|(_, load)| load.model_device == "cpu") {
        return None;
    }
    let wrong: Vec<String> = loads
        .iter()
        .filter(|(_, load)| load.device != load.model_device)
        .map(|(record, load)| {
            format!("{} loaded onto {} while its model is on {}", who(record), load.device, load.model_device)
        })
        .collect();
    let observed = if wrong.is_empty() {
        let devices: BTreeSet<&str> = loads.iter().map(|(_, load)| load.device.as_str()).collect();
        format!(
            "all {} load(s) onto the rank's own device ({})",
            loads.len(),
            devices.into_iter().collect::<Vec<_>>().join(", ")
        )
    } else {
        wrong.join("; ")
    };
    Finding::shown(wrong.is_empty(), observed, DEVICE_MAPPING_EXPECTED)
}

#[cfg(test)]
mod device_mapping_tests {
    use lab_trace::{Event, Trace};

    use super::*;
    use crate::checks::tests::nothing;
    use crate::checks::Evidence;

    fn load(rank: usize, device: &str, model_device: &str) -> Record {
        let mut record = Record::now(Event::from(LoadCheckpoint {
            dir: "ck".into(),
            device: device.into(),
            model_device: model_device.into(),
        }));
        record.rank = Some(rank);
        record
    }

    fn judged(records: Vec<Record>) -> Option<Finding> {
        let mut obs = nothing(12);
        obs.main.trace = Trace { records, malformed: Vec::new() };
        device_mapping(&obs)
    }

    #[test]
    fn on_cpu_the_mapping_cannot_show_and_the_check_does_not_apply() {
        assert!(judged(vec![load(0, "cpu", "cpu"), load(1, "cpu", "cpu")]).is_none());
        assert!(judged(Vec::new()).is_none(), "no load: read-after-whole says so");
    }

    #[test]
    fn on_gpus_each_rank_must_load_onto_its_own_device() {
        let mapped = judged(vec![load(0, "cuda:0", "cuda:0"), load(1, "cuda:1", "cuda:1")]).unwrap();
        assert_eq!(mapped.evidence, Evidence::Holds, "{}", mapped.observed);
        // Without the mapping every rank loads onto the device it was saved from.
        let unmapped = judged(vec![load(0, "cuda:0", "cuda:0"), load(1, "cuda:0", "cuda:1")]).unwrap();
        assert_eq!(unmapped.evidence, Evidence::Broken);
        assert_eq!(unmapped.observed, "rank 1 loaded onto cuda:0 while its model is on cuda:1");
    }
}

#[cfg(test)]
mod every_rank_tests {
    use lab_trace::{Event, Trace};

    use super::*;
    use crate::checks::tests::nothing;
    use crate::checks::Evidence;

    fn at(rank: usize, time: f64, event: impl Into<Event>) -> Record {
        let mut record = Record::now(event);
        record.rank = Some(rank);
        record.time = time;
        record
    }

    fn load(rank: usize, time: f64) -> Record {
        at(rank, time, LoadCheckpoint { dir: "ck".into(), device: "cpu".into(), model_device: "cpu".into() })
    }

    /// Rank 0 writes epoch 0's checkpoint from 1 s to 2 s; then `loads` of 2 ranks.
    fn judged(loads: Vec<Record>) -> (Evidence, String) {
        let mut obs = nothing(12);
        obs.variation.nodes = 1;
        obs.variation.ranks_per_node = 2;
        let mut records = vec![
            at(0, 1.0, SaveCheckpoint { epoch: 0, dir: "ck".into() }),
            at(0, 2.0, CheckpointSaved { epoch: 0, weights: "w".into(), md5: "m".into() }),
        ];
        records.extend(loads);
        obs.main.trace = Trace { records, malformed: Vec::new() };
        let finding = read_after_whole(&obs).unwrap();
        (finding.evidence, finding.observed)
    }

    fn run(records: Vec<Record>) -> crate::observe::Run {
        crate::observe::Run { processes: Vec::new(), trace: Trace { records, malformed: Vec::new() } }
    }

    /// Resumed after epoch 0 on 2 ranks: rank 0 loads and trains epoch 1; rank 1 as `rank1` says.
    fn resumed(rank1: Vec<Record>) -> (Evidence, String) {
        let mut obs = nothing(12);
        let settings =
            crate::observe::Variation { nodes: 1, ranks_per_node: 2, epochs: 2, ..obs.variation.clone() };
        let weights = |rank| at(rank, 3.0, Weights { epoch: 1, digest: "w".into(), projection: [0.0; 8] });
        let loaded = CheckpointLoaded { epoch: 0, weights: "ck".into(), digest: "c".into() };
        let mut records =
            vec![at(0, 1.0, loaded), at(0, 2.0, TrainIndices { epoch: 1, indices: vec![0; 16] }), weights(0)];
        records.extend(rank1);
        obs.insert(crate::observe::Runs::Resume(crate::observe::ResumeRuns {
            settings,
            stopped_after: 0,
            uninterrupted: run(vec![weights(0)]),
            stopped: run(Vec::new()),
            resumed: run(records),
        }));
        let finding = resume_equals_uninterrupted(&obs).unwrap();
        (finding.evidence, finding.observed)
    }

    #[test]
    fn every_rank_of_the_resumed_run_must_load_and_continue_as_rank_0() {
        let loaded = || at(1, 1.0, CheckpointLoaded { epoch: 0, weights: "ck".into(), digest: "c".into() });
        let trained = |epoch| at(1, 2.0, TrainIndices { epoch, indices: vec![0; 16] });
        assert_eq!(resumed(vec![loaded(), trained(1)]).0, Evidence::Holds);
        // Rank 1 decided not to load: it starts over at epoch 0, though rank 0's weights agree.
        let (evidence, observed) = resumed(vec![trained(0), trained(1)]);
        assert_eq!(evidence, Evidence::Broken);
        assert!(
            observed.ends_with("; but rank 1 loaded 0 checkpoint(s) and trained epochs {0, 1}"),
            "{observed}"
        );
    }

    #[test]
    fn every_rank_must_load_what_was_written() {
        assert_eq!(judged(vec![load(0, 3.0), load(1, 3.0)]).0, Evidence::Holds);
        assert_eq!(
            judged(vec![load(0, 3.0)]),
            (Evidence::Broken, "rank 1 loaded 0 of the 1 checkpoint(s) written".into())
        );
    }
}
