//! The timeline of a run, for Perfetto: `DDP_LAB_TIMELINE=DIR` makes every rank record
//! what it did and when (epochs, forward and backward passes, optimizer steps,
//! validation, each collective the program issued, and each of DDP's gradient-bucket
//! all-reduces: see [`tch_distributed::spans`]) and write it as a Chrome trace, the
//! format PyTorch's profiler writes, which <https://ui.perfetto.dev> and
//! `chrome://tracing` open.
//!
//! - Each rank writes `DIR/rank-<global rank>.json` as it goes (after each epoch's
//!   training and validation), in the trace format's JSON array form; the array is
//!   closed when the rank finishes (`labkit::finish`, or the end of a spawned worker).
//!   An unfinished file (a rank that crashed) is still a trace Perfetto opens.
//! - The last rank to finish merges every rank's file into `DIR/timeline.json`
//!   (`{"traceEvents": [...], "displayTimeUnit": "ms"}`): one process per rank
//!   ("rank N"), with the lanes "compute", "collectives" and one per DDP bucket ("DDP
//!   bucket i"), times in microseconds from the run's first event. [`merge_dir`] does
//!   the same by hand.
//!
//! Times come from the system clock, which the ranks of one machine share; ranks on
//! different machines line up only as well as their clocks do. On a GPU, the forward
//! and backward spans wait for the device at their end (so they measure the work, not
//! its launch), which slows the run a little; with the timeline off nothing is timed.
use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::SystemTime;

use serde_json::{json, Map, Value};
use tch_distributed as dist;
use tch_distributed::spans::{self, Arg, Event, Lane, Span};

use crate::trace;

/// Environment variable: the directory the timeline goes to. Unset: no timeline.
pub const TIMELINE_ENV: &str = "DDP_LAB_TIMELINE";

/// The merged file's name in the timeline directory.
pub const MERGED_FILE: &str = "timeline.json";

/// The timeline's directory, when `DDP_LAB_TIMELINE` is set.
fn dir() -> Option<&'static Path> {
    // This static and the three below are process-wide for the trace's reason: the
    // timeline is one per rank process, fed from labkit's calls and tch-distributed's
    // hooks, which the lab's code passes nothing to.
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| std::env::var_os(TIMELINE_ENV).filter(|d| !d.is_empty()).map(PathBuf::from)).as_deref()
}

/// Starts recording when `DDP_LAB_TIMELINE` is set (`RunOptions::apply` calls it,
/// before the program makes its process group and its DDP model).
pub fn start_if_asked() {
    if dir().is_some() && !spans::is_recording() {
        process_start();
        spans::start();
        // A spawned rank ends inside `spawn`, never reaching `labkit::finish`.
        dist::set_exit_hook(finish);
    }
}

/// Whether this process records its timeline.
pub fn enabled() -> bool {
    dir().is_some() && spans::is_recording()
}

/// A span of the program's own work ("forward", "backward", ...), on the compute lane.
pub(crate) fn span(name: impl Into<String>) -> Span {
    spans::span(name, "compute", Lane::Compute)
}

/// Waits for `device` when the timeline is on, so that a span ending now covers the
/// work queued on a GPU, not only its launch.
pub(crate) fn sync(device: tch::Device) {
    if let tch::Device::Cuda(index) = device {
        if enabled() {
            tch::Cuda::synchronize(index as i64);
        }
    }
}

/// The epoch being run: its number and when it started (set by `train`, closed by
/// `test`, which share no value the lab's code passes between them).
static EPOCH: Mutex<Option<(usize, f64)>> = Mutex::new(None);

/// `train` starts epoch `epoch` (ending the previous one if validation did not).
pub(crate) fn epoch_started(epoch: usize) {
    if !enabled() {
        return;
    }
    epoch_ended();
    *EPOCH.lock().unwrap_or_else(|p| p.into_inner()) = Some((epoch, spans::now_us()));
}

/// The epoch ends (after its validation): its span goes on the compute lane.
pub(crate) fn epoch_ended() {
    let Some((epoch, start_us)) = EPOCH.lock().unwrap_or_else(|p| p.into_inner()).take() else { return };
    spans::record(Event {
        name: format!("epoch {epoch}"),
        category: "compute",
        lane: Lane::Compute,
        start_us,
        dur_us: Some((spans::now_us() - start_us).max(0.0)),
        args: vec![("epoch", Arg::Int(epoch as i64))],
    });
}

/// This rank's file, open for appending, and the lanes it has named so far.
struct RankFile {
    file: File,
    rank: usize,
    /// The world's size as last seen while the process group was up: `finish` may run
    /// after `destroy_process_group` (steps 11-14 leave the job cleanly), when the
    /// group's size reads 1 and only rank 0's file would be merged.
    world_size: Option<usize>,
    lanes: BTreeSet<Lane>,
    closed: bool,
}

/// This rank's timeline file: one per process, flushed from `train` and `test` and closed
/// by `finish` or spawn's exit hook.
static FILE: Mutex<Option<RankFile>> = Mutex::new(None);

/// Appends what was recorded since the last flush to this rank's file (opened on first
/// use, once the rank is known). A failed write prints one warning; training goes on.
pub(crate) fn flush() {
    write_out(false);
}

/// [`flush`]; `last`: the process ends, so a process with events and no rank (no
/// process group, no launcher's `LOCAL_RANK`: a single-process program) is rank 0.
fn write_out(last: bool) {
    if !enabled() {
        return;
    }
    let mut guard = FILE.lock().unwrap_or_else(|p| p.into_inner());
    let mut events = spans::take();
    if guard.is_none() {
        let rank = trace::rank().or((last && !events.is_empty()).then_some(0));
        let (Some(rank), Some(dir)) = (rank, dir()) else {
            // Kept for later (the process that spawns the ranks never has one).
            events.into_iter().for_each(spans::record);
            return;
        };
        let path = rank_file(dir, rank);
        let opened = std::fs::create_dir_all(dir)
            .and_then(|_| OpenOptions::new().create(true).write(true).truncate(true).open(&path));
        match opened {
            Ok(mut file) => {
                let head =
                    process_metadata(rank).iter().map(Value::to_string).collect::<Vec<_>>().join(",\n");
                let _ = write!(file, "[\n{head}");
                *guard =
                    Some(RankFile { file, rank, world_size: None, lanes: BTreeSet::new(), closed: false });
            }
            Err(e) => {
                eprintln!("warning: cannot write the timeline file {}: {e}", path.display());
                spans::stop();
                return;
            }
        }
    }
    let Some(out) = guard.as_mut().filter(|f| !f.closed) else { return };
    if let Ok(size) = dist::get_world_size() {
        out.world_size = Some(size);
    }
    let mut text = String::new();
    events.sort_by(|a, b| a.start_us.total_cmp(&b.start_us));
    for event in events {
        if out.lanes.insert(event.lane) {
            for m in lane_metadata(out.rank, event.lane) {
                text.push_str(",\n");
                text.push_str(&m.to_string());
            }
        }
        text.push_str(",\n");
        text.push_str(&chrome_event(out.rank, &event).to_string());
    }
    let _ = out.file.write_all(text.as_bytes());
}

/// Ends this rank's timeline: the open epoch, the last events, the array closed; then,
/// when every rank's file is complete, the merged `timeline.json`. Runs once.
pub fn finish() {
    if !enabled() {
        return;
    }
    epoch_ended();
    write_out(true);
    let world_size = {
        let mut guard = FILE.lock().unwrap_or_else(|p| p.into_inner());
        let Some(out) = guard.as_mut().filter(|f| !f.closed) else { return };
        let _ = out.file.write_all(b"\n]\n").and_then(|_| out.file.sync_all());
        out.closed = true;
        out.world_size.unwrap_or(1)
    };
    spans::stop();
    let Some(dir) = dir() else { return };
    // The last rank to get here sees every file complete (each closes its own before
    // looking), and merges; files older than this process are from another run.
    let started = process_start();
    let complete = (0..world_size).all(|r| {
        let path = rank_file(dir, r);
        let fresh = std::fs::metadata(&path).and_then(|m| m.modified()).is_ok_and(|t| t >= started);
        fresh && std::fs::read(&path).is_ok_and(|b| b.trim_ascii_end().ends_with(b"]"))
    });
    if complete {
        let files: Vec<PathBuf> = (0..world_size).map(|r| rank_file(dir, r)).collect();
        if let Err(e) = merge_files(&files).and_then(|merged| write_merged(dir, &merged)) {
            eprintln!("warning: cannot merge the timeline in {}: {e}", dir.display());
        }
    }
}

/// When this process started its timeline (before it met the other ranks, so their
/// files of this run are newer; a previous run's are older).
fn process_start() -> SystemTime {
    *STARTED.get_or_init(SystemTime::now)
}

/// The process's start, a fact of the process.
static STARTED: OnceLock<SystemTime> = OnceLock::new();

fn rank_file(dir: &Path, rank: usize) -> PathBuf {
    dir.join(format!("rank-{rank}.json"))
}

fn write_merged(dir: &Path, merged: &Value) -> std::io::Result<()> {
    let mut text = serde_json::to_string(merged)?;
    text.push('\n');
    atomic_file::Writer::new().mode(0o644).write(&dir.join(MERGED_FILE), text)
}

/// One event in the Chrome trace format: a complete event (`"ph": "X"`, `ts` and `dur`
/// in microseconds) or, with no duration, an instant (`"ph": "i"`) on its thread;
/// `pid` is the rank, `tid` the lane.
pub fn chrome_event(rank: usize, event: &Event) -> Value {
    let mut e = Map::new();
    e.insert("name".into(), json!(event.name));
    e.insert("cat".into(), json!(event.category));
    match event.dur_us {
        Some(dur) => {
            e.insert("ph".into(), json!("X"));
            e.insert("ts".into(), json!(micros(event.start_us)));
            e.insert("dur".into(), json!(micros(dur)));
        }
        None => {
            e.insert("ph".into(), json!("i"));
            e.insert("s".into(), json!("t"));
            e.insert("ts".into(), json!(micros(event.start_us)));
        }
    }
    e.insert("pid".into(), json!(rank));
    e.insert("tid".into(), json!(event.lane.tid()));
    let args: Map<String, Value> = event
        .args
        .iter()
        .map(|(k, v)| {
            let v = match v {
                Arg::Int(i) => json!(i),
                Arg::Float(f) => json!(f),
                Arg::Text(t) => json!(t),
            };
            (k.to_string(), v)
        })
        .collect();
    if !args.is_empty() {
        e.insert("args".into(), Value::Object(args));
    }
    Value::Object(e)
}

/// Microseconds to a tenth of one (the trace's unit; finer is noise).
fn micros(us: f64) -> f64 {
    (us * 10.0).round() / 10.0
}

/// The rank's name and place in the trace ("rank N", sorted by rank).
fn process_metadata(rank: usize) -> Vec<Value> {
    vec![
        json!({ "name": "process_name", "ph": "M", "pid": rank, "tid": 0, "args": { "name": format!("rank {rank}") } }),
        json!({ "name": "process_sort_index", "ph": "M", "pid": rank, "tid": 0, "args": { "sort_index": rank } }),
    ]
}

/// A lane's name and place: compute first, then collectives, then the buckets.
fn lane_metadata(rank: usize, lane: Lane) -> Vec<Value> {
    let tid = lane.tid();
    vec![
        json!({ "name": "thread_name", "ph": "M", "pid": rank, "tid": tid, "args": { "name": lane.name() } }),
        json!({ "name": "thread_sort_index", "ph": "M", "pid": rank, "tid": tid, "args": { "sort_index": tid } }),
    ]
}

/// Reads one rank's file: a JSON array of events, closed or not (a rank that did not
/// finish leaves it open, as the trace format allows).
pub fn read_rank_file(path: &Path) -> std::io::Result<Vec<Value>> {
    let text = std::fs::read_to_string(path)?;
    let parsed = serde_json::from_str::<Value>(&text).or_else(|_| {
        let open = text.trim_end().trim_end_matches(',');
        serde_json::from_str::<Value>(&format!("{open}\n]"))
    });
    match parsed {
        Ok(Value::Array(events)) => Ok(events),
        Ok(_) => {
            Err(std::io::Error::other(format!("{} is not a JSON array of trace events", path.display())))
        }
        Err(e) => Err(std::io::Error::other(format!("{}: {e}", path.display()))),
    }
}

/// Merges ranks' files into one trace: every event, with times from the earliest one
/// (`otherData.origin_unix_us` says when that was).
pub fn merge_files(files: &[PathBuf]) -> std::io::Result<Value> {
    let mut events = Vec::new();
    for path in files {
        events.extend(read_rank_file(path)?);
    }
    let origin = events
        .iter()
        .filter(|e| e["ph"] != "M")
        .filter_map(|e| e["ts"].as_f64())
        .fold(f64::INFINITY, f64::min);
    let origin = if origin.is_finite() { origin } else { 0.0 };
    for e in &mut events {
        if let Some(ts) = e["ts"].as_f64() {
            e["ts"] = json!(micros(ts - origin));
        }
    }
    Ok(json!({
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": { "origin_unix_us": origin, "source": "ddp-lab (DDP_LAB_TIMELINE)" },
    }))
}

/// Merges every `rank-N.json` in `dir` (ranks 0, 1, … until one is missing) into
/// `dir/timeline.json`; returns its path.
pub fn merge_dir(dir: &Path) -> std::io::Result<PathBuf> {
    let files: Vec<PathBuf> = (0..).map(|r| rank_file(dir, r)).take_while(|p| p.exists()).collect();
    if files.is_empty() {
        return Err(std::io::Error::other(format!("no rank-0.json in {}", dir.display())));
    }
    write_merged(dir, &merge_files(&files)?)?;
    Ok(dir.join(MERGED_FILE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_become_chrome_trace_events() {
        let span = Event {
            name: "forward".into(),
            category: "compute",
            lane: Lane::Compute,
            start_us: 1_000_000.26,
            dur_us: Some(1234.56),
            args: vec![("batch", Arg::Int(3))],
        };
        assert_eq!(
            chrome_event(1, &span),
            json!({ "name": "forward", "cat": "compute", "ph": "X", "ts": 1_000_000.3,
                    "dur": 1234.6, "pid": 1, "tid": 0, "args": { "batch": 3 } })
        );
        let instant = Event { dur_us: None, args: vec![], lane: Lane::Bucket(2), ..span };
        assert_eq!(
            chrome_event(0, &instant),
            json!({ "name": "forward", "cat": "compute", "ph": "i", "s": "t", "ts": 1_000_000.3,
                    "pid": 0, "tid": 4 })
        );
    }

    #[test]
    fn merging_reads_open_and_closed_files_and_starts_the_clock_at_the_first_event() {
        let dir = tempfile::tempdir().unwrap();
        let event = |rank: usize, ts: f64| {
            chrome_event(
                rank,
                &Event {
                    name: "barrier".into(),
                    category: "collective",
                    lane: Lane::Collectives,
                    start_us: ts,
                    dur_us: Some(5.0),
                    args: vec![],
                },
            )
        };
        let meta = |rank| process_metadata(rank).iter().map(Value::to_string).collect::<Vec<_>>().join(",\n");
        // Rank 0 finished; rank 1 crashed with its array open.
        std::fs::write(rank_file(dir.path(), 0), format!("[\n{},\n{}\n]\n", meta(0), event(0, 1000.0)))
            .unwrap();
        std::fs::write(rank_file(dir.path(), 1), format!("[\n{},\n{}", meta(1), event(1, 1010.0))).unwrap();
        let path = merge_dir(dir.path()).unwrap();
        let merged: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        assert_eq!(merged["displayTimeUnit"], "ms");
        assert_eq!(merged["otherData"]["origin_unix_us"], 1000.0);
        let events = merged["traceEvents"].as_array().unwrap();
        let spans: Vec<(u64, f64)> = events
            .iter()
            .filter(|e| e["ph"] == "X")
            .map(|e| (e["pid"].as_u64().unwrap(), e["ts"].as_f64().unwrap()))
            .collect();
        assert_eq!(spans, [(0, 0.0), (1, 10.0)]);
        assert_eq!(events.iter().filter(|e| e["name"] == "process_name").count(), 2);
    }
}
