//! Step 5: the data set prepared once per node, and read only once it is ready.
use std::collections::BTreeMap;

use lab_trace::event::{DatasetReady, LoadDataset, PrepareDataset};
use lab_trace::Record;

use super::collectives;
use super::{events, malformed, Check, Finding, Step};
use crate::observe::{Gains, Observation, RunKind};

pub const PREPARE_ONCE_PER_NODE: &str = "prepare-once-per-node";
pub const DOWNLOADS_PER_NODE: &str = "downloads-per-node";
pub const DATA_BARRIER: &str = "data-barrier";

pub const STEP: Step = Step {
    gains: &[Gains::DataOncePerNode],
    runs: &[],
    checks: &[
        Check {
            id: PREPARE_ONCE_PER_NODE,
            observes: "which ranks prepared the data set",
            needs: Some(RunKind::Main),
            hint: "`if local_rank == 0 { prepare }`, then dist::barrier(), then every rank loads (guide: step 5)",
            judge: prepare_once_per_node,
        },
        Check {
            id: DOWNLOADS_PER_NODE,
            observes: "the files the local mirror served",
            needs: Some(RunKind::Main),
            hint: "only local rank 0 of each node may download (guide: step 5)",
            judge: downloads_per_node,
        },
        Check {
            id: DATA_BARRIER,
            observes: "when each rank began reading the data set and when its node's copy was ready (preparing made 1 s late)",
            // A read seen too early is evidence however the run ended (the reading rank
            // usually dies of the missing files); no read at all after a crash is not.
            needs: Some(RunKind::Main),
            hint: "dist::barrier() after local rank 0 prepares the data set and before any rank loads it, on every rank (guide: step 5)",
            judge: data_barrier,
        },
    ],
};

fn prepare_once_per_node(obs: &Observation) -> Option<Finding> {
    let nodes = obs.variation.nodes;
    let Ok(trace) = obs.main.trace.checked() else { return malformed(&obs.main.trace) };
    let prepares = events::<PrepareDataset>(trace);
    let expected = format!("{nodes} (one per node, by local rank 0), then a barrier before anyone reads");
    if prepares.is_empty() {
        return Finding::missing("no rank prepared the data set", expected);
    }
    let by_non_zero = prepares.iter().filter(|(record, _)| record.local_rank != Some(0)).count();
    Finding::shown(
        by_non_zero == 0 && prepares.len() == nodes,
        format!("{} preparation(s); {by_non_zero} by a local rank other than 0", prepares.len()),
        expected,
    )
}

fn downloads_per_node(obs: &Observation) -> Option<Finding> {
    let downloads = obs.downloads.as_ref()?;
    let nodes = obs.variation.nodes;
    let expected = format!("each of the four files exactly {nodes} time(s), once per node");
    let observed = format!("the mirror served {downloads:?}");
    if downloads.values().all(|&n| n == 0) {
        return Finding::missing(observed, expected);
    }
    let ok = labkit::data::FILES.iter().all(|f| downloads.get(*f).copied().unwrap_or(0) == nodes);
    Finding::shown(ok, observed, expected)
}

const DATA_BARRIER_EXPECTED: &str =
    "every rank begins reading a data directory after its preparation has finished (the barrier)";

/// Every read against the preparations of its directory (each node has its own
/// `--data-dir`, so a directory is a node's copy). Which rank prepares is
/// `prepare-once-per-node`'s business; here any finished preparation of the directory
/// will do, so a program where every rank prepares is not blamed twice.
fn data_barrier(obs: &Observation) -> Option<Finding> {
    if let Some(mine) = collectives::owned(obs, RunKind::Main, DATA_BARRIER, DATA_BARRIER_EXPECTED) {
        return Some(mine);
    }
    let Ok(trace) = obs.main.trace.checked() else { return malformed(&obs.main.trace) };
    let reads = events::<LoadDataset>(trace);
    if reads.is_empty() {
        return Finding::missing("no rank began reading the data set", DATA_BARRIER_EXPECTED);
    }
    match early_reads(trace) {
        Some(early) => Finding::shown(false, early, DATA_BARRIER_EXPECTED),
        None => Finding::shown(
            true,
            format!("all {} read(s) began after their directory was ready", reads.len()),
            DATA_BARRIER_EXPECTED,
        ),
    }
}

/// The reads that began before their directory was ready, in words; `None` when every
/// read waited. The step 0 check `trains` asks too: such a read is why a rank died.
pub(super) fn early_reads(trace: &[Record]) -> Option<String> {
    let start = trace.first()?.time;
    // When each directory was first ready: a process's `dataset_ready` ends the
    // preparation of the directory its `prepare_dataset` named.
    let mut preparing: BTreeMap<u32, &str> = BTreeMap::new();
    let mut ready: BTreeMap<&str, f64> = BTreeMap::new();
    for record in trace {
        if let Some(prepare) = record.get::<PrepareDataset>() {
            preparing.insert(record.pid, &prepare.dir);
        } else if record.get::<DatasetReady>().is_some() {
            if let Some(dir) = preparing.remove(&record.pid) {
                ready.entry(dir).or_insert(record.time);
            }
        }
    }
    let early: Vec<String> = events::<LoadDataset>(trace)
        .into_iter()
        .filter_map(|(record, read)| {
            let who = match (record.rank, record.local_rank) {
                (Some(rank), Some(local)) => format!("rank {rank} (local rank {local})"),
                (None, Some(local)) => format!("local rank {local}"),
                (Some(rank), None) => format!("rank {rank}"),
                (None, None) => format!("process {}", record.pid),
            };
            let dir = std::path::Path::new(&read.dir)
                .file_name()
                .map_or(read.dir.clone(), |name| name.to_string_lossy().into_owned());
            let began = record.time - start;
            match ready.get(read.dir.as_str()) {
                Some(&at) if at <= record.time => None,
                Some(&at) => Some(format!(
                    "{who} began reading {dir} at {began:.2} s, {:.2} s before its preparation finished",
                    at - record.time
                )),
                None => {
                    Some(format!("{who} began reading {dir} at {began:.2} s; no preparation of it finished"))
                }
            }
        })
        .collect();
    (!early.is_empty()).then(|| early.join("; "))
}

#[cfg(test)]
mod tests {
    use lab_trace::{DatasetAction, DatasetKind, Event, Record, Trace};

    use super::*;
    use crate::checks::tests::nothing;
    use crate::checks::{judge, Verdict};

    /// A record of process `pid` (local rank `local`) at `time` seconds.
    fn at(time: f64, pid: u32, local: usize, event: impl Into<Event>) -> Record {
        let mut record = Record::now(event);
        (record.time, record.pid, record.local_rank, record.rank) = (time, pid, Some(local), Some(local));
        record
    }

    fn prepared(pid: u32, from: f64, to: f64, dir: &str) -> [Record; 2] {
        let kind = DatasetKind::Real;
        let ready = DatasetReady {
            dir: dir.into(),
            kind_used: kind,
            action: DatasetAction::Downloaded,
            downloaded: vec![],
        };
        [at(from, pid, 0, PrepareDataset { dir: dir.into(), kind }), at(to, pid, 0, ready)]
    }

    fn read(time: f64, pid: u32, local: usize, dir: &str) -> Record {
        at(time, pid, local, LoadDataset { dir: dir.into() })
    }

    fn barrier_of(records: Vec<Record>) -> (crate::checks::Evidence, String) {
        let mut obs = nothing(5);
        obs.main.trace = Trace { records, malformed: vec![] };
        let finding = data_barrier(&obs).unwrap();
        (finding.evidence, finding.observed)
    }

    #[test]
    fn a_read_before_its_directory_is_ready_breaks_the_barrier() {
        let mut records = prepared(10, 1.0, 2.5, "/w/data-node0").to_vec();
        records.push(read(1.2, 11, 1, "/w/data-node0"));
        records.push(read(2.6, 10, 0, "/w/data-node0"));
        records.sort_by(|a, b| a.time.total_cmp(&b.time));
        let (evidence, observed) = barrier_of(records);
        assert_eq!(evidence, crate::checks::Evidence::Broken);
        assert_eq!(
            observed,
            "rank 1 (local rank 1) began reading data-node0 at 0.20 s, 1.30 s before its preparation finished"
        );
    }

    #[test]
    fn reads_after_their_own_nodes_preparation_hold() {
        // Node 1's copy is ready late; its reader waited for it, not for node 0's.
        let mut records = prepared(10, 1.0, 2.0, "/w/data-node0").to_vec();
        records.extend(prepared(20, 1.0, 3.0, "/w/data-node1"));
        records.extend([read(2.1, 11, 1, "/w/data-node0"), read(3.1, 21, 1, "/w/data-node1")]);
        records.sort_by(|a, b| a.time.total_cmp(&b.time));
        assert_eq!(barrier_of(records.clone()).0, crate::checks::Evidence::Holds);
        // Without a preparation of its own directory, a read is early however late it is.
        records.retain(|r| r.pid != 20);
        let (evidence, observed) = barrier_of(records);
        assert_eq!(evidence, crate::checks::Evidence::Broken);
        assert!(
            observed.ends_with("began reading data-node1 at 2.10 s; no preparation of it finished"),
            "{observed}"
        );
    }

    /// Every rank preparing (the starter) reads complete data: `prepare-once-per-node`
    /// fails, this check does not blame the same mistake again.
    #[test]
    fn every_rank_preparing_before_it_reads_holds() {
        let mut records = prepared(10, 1.0, 2.0, "/w/d").to_vec();
        let [start, end] = prepared(11, 1.0, 2.2, "/w/d");
        records.extend([start, end, read(2.1, 10, 0, "/w/d"), read(2.3, 11, 1, "/w/d")]);
        records.sort_by(|a, b| a.time.total_cmp(&b.time));
        assert_eq!(barrier_of(records).0, crate::checks::Evidence::Holds);
    }

    /// The reading rank died of the missing files: the report blames step 5, where the
    /// barrier is missing, and leaves `trains` unjudged.
    #[test]
    fn a_rank_that_died_reading_too_early_is_blamed_on_step_5() {
        let mut obs = nothing(5);
        let mut records = prepared(10, 1.0, 2.0, "/w/d").to_vec();
        records.push(read(1.1, 11, 1, "/w/d"));
        records.sort_by(|a, b| a.time.total_cmp(&b.time));
        obs.main.trace = Trace { records, malformed: vec![] };
        let mut died = crate::job::Ended::not_started(
            "node0-rank1",
            "error: /w/d/train-images-idx3-ubyte.gz is missing.",
        );
        died.status = Some(std::os::unix::process::ExitStatusExt::from_raw(2 << 8));
        obs.main.processes.push(crate::observe::RankProcess { node: 0, local_rank: Some(1), ended: died });
        let results = judge(&obs);
        let verdict = |id: &str| results.iter().find(|r| r.id == id).unwrap();
        assert_eq!(verdict(DATA_BARRIER).verdict, Verdict::Fail);
        let trains = verdict(crate::checks::step_00::TRAINS);
        assert_eq!(trains.verdict, Verdict::CouldNotJudge, "{trains:?}");
        assert!(
            trains.observed.starts_with(
                "could not judge: a rank read the data set before it was ready (step 5's `data-barrier`): rank 1"
            ),
            "{}",
            trains.observed
        );
        // Before step 5 the barrier is not checked, and the crash is `trains`' own.
        obs.step = 4;
        let trains = judge(&obs).into_iter().find(|r| r.id == crate::checks::step_00::TRAINS).unwrap();
        assert_eq!(trains.verdict, Verdict::Fail);
    }

    #[test]
    fn a_malformed_line_is_reported_not_skipped() {
        let mut obs = nothing(5);
        let mut bad = read(1.0, 11, 1, "/w/d").to_value();
        bad.as_object_mut().unwrap().remove("dir");
        obs.main.trace = serde_json::from_value(serde_json::json!([bad])).unwrap();
        let finding = data_barrier(&obs).unwrap();
        assert_eq!(finding.evidence, crate::checks::Evidence::Missing);
        assert_eq!(
            finding.observed,
            "the trace is malformed: line 1: event `load_dataset`: missing field `dir`"
        );
    }
}
