//! `timeline-hand-ddp.svg`: one training step of each mode of the `hand_ddp` benchmark
//! (`bench/src/bin/hand_ddp.rs`), rank 0's, from the timeline it wrote
//! (`timelines/hand-ddp.json`; `timelines/README.md` says how it was recorded): when
//! backward ended, and which all-reduce of the gradients ran before that (overlapped)
//! or after it (the step waits for it). Every mode on one scale, each from its own
//! step's start.
use std::path::{Path, PathBuf};

use serde_json::Value;

use guide_svg::{Svg, INK, MUTED};

use crate::timeline_figure::{bar, legend_row, spans, Scale, Span};

/// The recorded timeline the figure is drawn from.
pub fn recorded_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("timelines/hand-ddp.json")
}

/// The benchmark's modes, in its order, with what the figure calls them.
const MODES: [(&str, &str); 4] = [
    ("by-hand", "by hand: one all-reduce per parameter after backward"),
    ("buckets", "by hand: buckets launched from gradient hooks"),
    ("library", "tch-distributed's DistributedDataParallel"),
    ("pytorch", "PyTorch's DistributedDataParallel"),
];

/// One mode's step: its spans, times in seconds from the step's start.
struct Step {
    title: &'static str,
    spans: Vec<Span>,
    backward_end: f64,
}

/// The trace process of each mode (`process_name` metadata), in [`MODES`] order.
fn steps(trace: &Value) -> Result<Vec<Step>, String> {
    let all = spans(trace)?;
    let events = trace["traceEvents"].as_array().ok_or("the timeline has no traceEvents array")?;
    let mut steps = Vec::new();
    for (mode, title) in MODES {
        let pid = events
            .iter()
            .find(|e| e["name"] == "process_name" && e["args"]["name"] == mode)
            .and_then(|e| e["pid"].as_u64())
            .ok_or_else(|| format!("the recorded timeline has no {mode} process"))?;
        let mut mine: Vec<Span> = all.iter().filter(|s| s.rank == pid).cloned().collect();
        let start = mine.iter().map(|s| s.start).fold(f64::INFINITY, f64::min);
        for s in &mut mine {
            s.start -= start;
            s.end -= start;
        }
        let backward = mine
            .iter()
            .find(|s| s.name == "backward")
            .ok_or_else(|| format!("the {mode} step has no backward"))?;
        let backward_end = backward.end;
        if !mine.iter().any(|s| s.name.starts_with("all_reduce")) {
            return Err(format!("the {mode} step has no all-reduce"));
        }
        steps.push(Step { title, spans: mine, backward_end });
    }
    Ok(steps)
}

/// The communication lanes of a step: the collectives' lane (1), then each bucket's.
fn comm_lanes(step: &Step) -> Vec<u64> {
    let mut lanes: Vec<u64> = step.spans.iter().filter(|s| s.lane >= 1).map(|s| s.lane).collect();
    lanes.sort_unstable();
    lanes.dedup();
    lanes
}

/// The figure, from the benchmark's `--timeline` file.
pub fn overlap_figure(trace: &Value) -> Result<String, String> {
    let steps = steps(trace)?;
    let longest = steps.iter().flat_map(|s| &s.spans).map(|s| s.end).fold(0.0, f64::max);
    let (width, x0, x1) = (900.0, 150.0, 880.0);
    let lane_h = 22.0;
    let comm_h = 13.0;
    let settings = trace["otherData"]["settings"].as_str().unwrap_or("");
    let intro = format!(
        "Rank 0's median step of each mode of the hand_ddp benchmark, on one scale, each from its own step's start. {settings}. How it was recorded: tools/guide-figures/timelines/README.md."
    );
    let intro = wrap(&intro, 140);
    let top = 68.0 + 14.0 * intro.len() as f64;
    let heights: Vec<f64> =
        steps.iter().map(|s| 24.0 + lane_h + 4.0 + comm_h * comm_lanes(s).len() as f64 + 30.0).collect();
    let height = top + heights.iter().sum::<f64>() + 90.0;
    let mut svg = Svg::new(
        width,
        height,
        "One training step of rank 0 in each mode of the hand_ddp benchmark: which all-reduce ran while backward went on",
    );
    svg.text(20.0, 30.0, "title", "", "Which all-reduce ran while backward was still computing");
    for (i, line) in intro.iter().enumerate() {
        svg.text(20.0, 50.0 + 14.0 * i as f64, "small", "", line);
    }
    let scale = Scale { t0: 0.0, t1: longest * 1.02, x0, x1 };
    let mut y = top;
    for (step, h) in steps.iter().zip(&heights) {
        let launched = step.spans.iter().filter(|s| s.name.starts_with("all_reduce")).count();
        let inside = step
            .spans
            .iter()
            .filter(|s| s.name.starts_with("all_reduce") && s.start < step.backward_end)
            .count();
        svg.text(
            20.0,
            y + 14.0,
            "head",
            "",
            &format!("{}: {inside} of {launched} all-reduces launched before backward ended", step.title),
        );
        let lane_y = y + 22.0;
        svg.text(20.0, lane_y + 15.0, "small", "", "compute");
        for s in step.spans.iter().filter(|s| s.lane == 0) {
            let label = if s.name == "waiting for gradients" { "wait" } else { s.name.as_str() };
            bar(&mut svg, &scale, s, lane_y, lane_h - 4.0, label);
        }
        for (i, lane) in comm_lanes(step).iter().enumerate() {
            let by = lane_y + lane_h + 4.0 + comm_h * i as f64;
            let name =
                if *lane == 1 { "all_reduce per param".to_string() } else { format!("bucket {}", lane - 2) };
            svg.text(20.0, by + 9.0, "small", "", &name);
            for s in step.spans.iter().filter(|s| s.lane == *lane) {
                bar(&mut svg, &scale, s, by, comm_h - 3.0, "");
            }
        }
        // Backward's end, across the step's lanes.
        let bx = scale.x(step.backward_end);
        let bottom = lane_y + lane_h + 4.0 + comm_h * comm_lanes(step).len() as f64;
        svg.line(bx, lane_y - 4.0, bx, bottom, &format!("stroke=\"{INK}\" stroke-dasharray=\"3 3\""));
        y += h;
    }
    axis_ms(&mut svg, &scale, y - 14.0);
    let legend_y = y + 30.0;
    let items = [
        ("forward", "forward"),
        ("backward", "backward (to its last gradient)"),
        ("waiting", "waiting for the all-reduces"),
        ("optimizer step", "optimizer step"),
        ("all_reduce bucket 0", "bucket all-reduce"),
        ("all_reduce", "all-reduce"),
    ];
    legend_row(&mut svg, &items, legend_y);
    svg.text(
        20.0,
        legend_y + 22.0,
        "small",
        &format!("style=\"fill:{MUTED}\""),
        "Dashed: backward's end. A hand-written bucket ends when its wait() returned, the libraries' when the all-reduce completed.",
    );
    Ok(svg.finish())
}

/// `text` in lines of at most about `width` characters, broken between words.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split_whitespace() {
        match lines.last_mut() {
            Some(line) if line.len() + 1 + word.len() <= width => {
                line.push(' ');
                line.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    lines
}

/// An axis in milliseconds from the step's start.
fn axis_ms(svg: &mut Svg, scale: &Scale, y: f64) {
    svg.line(scale.x0, y, scale.x1, y, &format!("stroke=\"{MUTED}\""));
    let range_ms = (scale.t1 - scale.t0) * 1e3;
    let step = [0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]
        .into_iter()
        .find(|s| range_ms / s <= 10.0)
        .unwrap_or(200.0);
    let mut k = 0.0;
    while k * step <= range_ms + 1e-9 {
        let x = scale.x(k * step / 1e3);
        svg.line(x, y, x, y + 4.0, &format!("stroke=\"{MUTED}\""));
        let label = format!("{} ms", (k * step * 10.0).round() / 10.0);
        svg.text(x, y + 16.0, "small", "text-anchor=\"middle\"", &label);
        k += 1.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn x(name: &str, pid: u64, tid: u64, ts: f64, dur: f64) -> Value {
        json!({ "name": name, "ph": "X", "pid": pid, "tid": tid, "ts": ts, "dur": dur })
    }

    fn process(pid: u64, name: &str) -> Value {
        json!({ "name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": { "name": name } })
    }

    #[test]
    fn each_mode_counts_the_all_reduces_launched_before_backward_ended() {
        let mut events = Vec::new();
        for (pid, (mode, _)) in MODES.iter().enumerate() {
            let pid = pid as u64;
            let base = 1e9 * (pid + 1) as f64;
            events.push(process(pid, mode));
            events.push(x("backward", pid, 0, base, 1000.0));
            // One launched inside backward, one after it.
            events.push(x("all_reduce bucket 0", pid, 2, base + 400.0, 900.0));
            events.push(x("all_reduce bucket 1", pid, 3, base + 1200.0, 300.0));
        }
        let svg =
            overlap_figure(&json!({ "traceEvents": events, "otherData": { "settings": "tiny" } })).unwrap();
        assert_eq!(svg.matches("1 of 2 all-reduces launched before backward ended").count(), 4, "{svg}");
        // Each step from its own start: the scale ends just after the longest step (1.5 ms).
        assert!(svg.contains(">1.4 ms<") && !svg.contains(">1.6 ms<"), "{svg}");
    }

    #[test]
    fn a_timeline_without_a_mode_is_refused() {
        let events =
            vec![process(0, "by-hand"), x("backward", 0, 0, 0.0, 10.0), x("all_reduce", 0, 1, 20.0, 5.0)];
        let err = overlap_figure(&json!({ "traceEvents": events })).unwrap_err();
        assert!(err.contains("no buckets process"), "{err}");
    }
}
