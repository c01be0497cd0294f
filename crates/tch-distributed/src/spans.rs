//! A timeline of what this process did: spans of work with their start and duration,
//! the raw material of a Chrome trace (the format PyTorch's profiler writes, which
//! Perfetto and `chrome://tracing` open).
//!
//! Off until [`start`] is called; while it is off, nothing is recorded and nothing is
//! timed. Once on:
//! - every collective this crate issues (`barrier`, `reduce`, `all_reduce`, …, and
//!   DDP's `broadcast_coalesced` of the model's state) becomes an event on the
//!   [`Lane::Collectives`] lane, from the call until `wait()` returned;
//! - a [`DistributedDataParallel`](crate::DistributedDataParallel) made afterwards
//!   installs a communication hook on its Reducer that times each gradient bucket's
//!   all-reduce, from its launch inside backward until it completed, on the lane
//!   [`Lane::Bucket`] of its index (buckets of one backward pass can be in flight
//!   together). The hook computes what the Reducer computes without one, to the bit
//!   (PyTorch's default `gradient_as_bucket_view = false`);
//! - programs add their own spans ([`span`]): the lab's forward and backward passes,
//!   optimizer steps, epochs.
//!
//! Times are microseconds since the Unix epoch (the system clock), so the timelines of
//! the ranks of one machine line up. [`take`] hands the events recorded so far to whoever
//! writes them out.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// Where an event is drawn: a thread of the trace (its `tid`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Lane {
    /// The program's own thread: forward, backward, optimizer steps, epochs.
    Compute,
    /// Collectives the program issued, from the call until it returned.
    Collectives,
    /// DDP's all-reduce of gradient bucket `i` (in reduction order), on the backend's
    /// threads while backward goes on.
    Bucket(usize),
}

impl Lane {
    /// The trace's thread id of this lane.
    pub fn tid(self) -> u64 {
        match self {
            Lane::Compute => 0,
            Lane::Collectives => 1,
            Lane::Bucket(i) => 2 + i as u64,
        }
    }

    /// What the trace calls this lane.
    pub fn name(self) -> String {
        match self {
            Lane::Compute => "compute".to_string(),
            Lane::Collectives => "collectives".to_string(),
            Lane::Bucket(i) => format!("DDP bucket {i}"),
        }
    }
}

/// A value attached to an event (the trace's `args`).
#[derive(Debug, Clone, PartialEq)]
pub enum Arg {
    /// A count or a size (bytes, parameters, a bucket's index).
    Int(i64),
    /// A measured value.
    Float(f64),
    /// A name or a description.
    Text(String),
}

/// One span of work (or, with no duration, one instant).
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// What happened: `forward`, `all_reduce`, `bucket 2`, ...
    pub name: String,
    /// The trace's `cat`: `compute`, `collective`, `ddp`.
    pub category: &'static str,
    /// Where the trace shows it.
    pub lane: Lane,
    /// Microseconds since the Unix epoch.
    pub start_us: f64,
    /// `None`: an instant (e.g. DDP regrouping its buckets).
    pub dur_us: Option<f64>,
    /// The trace's `args`: what a viewer shows of the event when it is selected.
    pub args: Vec<(&'static str, Arg)>,
}

static RECORDING: AtomicBool = AtomicBool::new(false);
static EVENTS: Mutex<Vec<Event>> = Mutex::new(Vec::new());

/// Starts recording this process's timeline.
pub fn start() {
    RECORDING.store(true, Ordering::SeqCst);
}

/// Stops recording (what was recorded stays until [`take`]n).
pub fn stop() {
    RECORDING.store(false, Ordering::SeqCst);
}

/// Whether the timeline is being recorded.
pub fn is_recording() -> bool {
    RECORDING.load(Ordering::Relaxed)
}

/// Microseconds since the Unix epoch, the timeline's clock.
pub fn now_us() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64() * 1e6).unwrap_or(0.0)
}

/// Adds an event (when recording).
pub fn record(event: Event) {
    if is_recording() {
        EVENTS.lock().unwrap_or_else(|p| p.into_inner()).push(event);
    }
}

/// The events recorded since the last call, in the order they ended.
pub fn take() -> Vec<Event> {
    std::mem::take(&mut *EVENTS.lock().unwrap_or_else(|p| p.into_inner()))
}

/// A span being timed: recorded when [`end`](Span::end)ed or dropped.
#[derive(Debug)]
pub struct Span {
    event: Option<Event>,
}

/// An event starting now on `lane`, if the timeline is recording.
fn event_now(name: impl Into<String>, category: &'static str, lane: Lane) -> Option<Event> {
    is_recording().then(|| Event {
        name: name.into(),
        category,
        lane,
        start_us: now_us(),
        dur_us: None,
        args: Vec::new(),
    })
}

/// Attaches a value to a span's or an instant's event (none when the timeline is off).
fn attach(event: &mut Option<Event>, key: &'static str, value: Arg) {
    if let Some(e) = event {
        e.args.push((key, value));
    }
}

/// Starts timing a span on `lane` (nothing is timed when the timeline is off).
pub fn span(name: impl Into<String>, category: &'static str, lane: Lane) -> Span {
    Span { event: event_now(name, category, lane) }
}

impl Span {
    /// Attaches a value to the span.
    pub fn arg(mut self, key: &'static str, value: Arg) -> Self {
        attach(&mut self.event, key, value);
        self
    }

    /// Whether this span is timed (the timeline was on when it started).
    pub fn is_timed(&self) -> bool {
        self.event.is_some()
    }

    /// Ends the span now.
    pub fn end(mut self) {
        self.finish();
    }

    fn finish(&mut self) {
        if let Some(mut e) = self.event.take() {
            e.dur_us = Some((now_us() - e.start_us).max(0.0));
            record(e);
        }
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        self.finish();
    }
}

/// An instant, taken when [`instant`] was called, recorded by [`record`](Mark::record).
#[derive(Debug)]
#[must_use = "an instant is recorded by .record()"]
pub struct Mark {
    event: Option<Event>,
}

/// Marks an instant on `lane`: attach values with [`Mark::arg`], as to a [`Span`], then
/// [`record`](Mark::record) it (nothing is recorded when the timeline is off).
pub fn instant(name: impl Into<String>, category: &'static str, lane: Lane) -> Mark {
    Mark { event: event_now(name, category, lane) }
}

impl Mark {
    /// Attaches a value to the instant.
    pub fn arg(mut self, key: &'static str, value: Arg) -> Self {
        attach(&mut self.event, key, value);
        self
    }

    /// Records the instant.
    pub fn record(self) {
        if let Some(e) = self.event {
            record(e);
        }
    }
}

/// The shim's report of one gradient bucket's all-reduce (on a backend thread).
pub(crate) extern "C" fn bucket_reduced(index: usize, params: usize, bytes: i64, start_us: f64, end_us: f64) {
    // Nothing may unwind into C++.
    let _ = std::panic::catch_unwind(|| {
        record(Event {
            name: format!("all_reduce bucket {index}"),
            category: "ddp",
            lane: Lane::Bucket(index),
            start_us,
            dur_us: Some((end_us - start_us).max(0.0)),
            args: vec![
                ("bucket", Arg::Int(index as i64)),
                ("params", Arg::Int(params as i64)),
                ("bytes", Arg::Int(bytes)),
            ],
        })
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_are_timed_only_while_recording() {
        // One test owns the process-wide recorder.
        let off = span("before", "compute", Lane::Compute);
        assert!(!off.is_timed());
        off.end();
        start();
        let on = span("forward", "compute", Lane::Compute).arg("batch", Arg::Int(3));
        std::thread::sleep(std::time::Duration::from_millis(2));
        on.end();
        instant("mark", "ddp", Lane::Collectives).record();
        bucket_reduced(1, 4, 64, 10.0, 25.0);
        stop();
        span("after", "compute", Lane::Compute).end();
        let events = take();
        let names: Vec<&str> = events.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["forward", "mark", "all_reduce bucket 1"]);
        assert!(events[0].dur_us.unwrap() >= 2000.0, "{:?}", events[0]);
        assert_eq!(events[0].args, vec![("batch", Arg::Int(3))]);
        assert_eq!(events[1].dur_us, None);
        assert_eq!((events[2].lane, events[2].dur_us), (Lane::Bucket(1), Some(15.0)));
        assert_eq!(Lane::Bucket(1).tid(), 3);
        assert!(take().is_empty());
    }
}
