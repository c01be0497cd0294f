//! `timeline-step-08.svg`: a real run's timeline (`DDP_LAB_TIMELINE`), as Perfetto
//! would show it, drawn from the merged trace committed beside this crate
//! (`timelines/step-08.json`; `timelines/README.md` says how it was recorded).
//!
//! Top: one epoch, each rank on two lanes, its own work (forward, backward, optimizer
//! steps, validation) above the collectives it issued (DDP's broadcast of buffers,
//! the barrier, the reduce). Bottom: one backward pass of each rank, magnified, with
//! DDP's bucket all-reduces on a lane per bucket beneath it.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use guide_svg::{Svg, INK, MUTED};

/// The recorded trace the figure is drawn from.
pub fn recorded_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("timelines/step-08.json")
}

/// A complete event of the trace.
#[derive(Debug, Clone)]
pub struct Span {
    pub rank: u64,
    pub lane: u64,
    pub name: String,
    /// Seconds from the trace's origin.
    pub start: f64,
    pub end: f64,
    pub bytes: Option<u64>,
}

/// The complete (`"ph": "X"`) events of a merged trace.
pub fn spans(trace: &Value) -> Result<Vec<Span>, String> {
    let events = trace["traceEvents"].as_array().ok_or("the trace has no traceEvents array")?;
    let mut spans = Vec::new();
    for e in events.iter().filter(|e| e["ph"] == "X") {
        let num = |k: &str| e[k].as_f64().ok_or_else(|| format!("an event without {k}: {e}"));
        let start = num("ts")? / 1e6;
        spans.push(Span {
            rank: e["pid"].as_u64().ok_or_else(|| format!("an event without pid: {e}"))?,
            lane: e["tid"].as_u64().ok_or_else(|| format!("an event without tid: {e}"))?,
            name: e["name"].as_str().unwrap_or("").to_string(),
            start,
            end: start + num("dur")? / 1e6,
            bytes: e["args"]["bytes"].as_u64(),
        });
    }
    Ok(spans)
}

/// Fill and stroke of a span by what it is.
pub(crate) fn colour(span: &Span) -> (&'static str, &'static str) {
    match span.name.as_str() {
        "forward" => ("#dbe7f6", "#2f6db5"),
        "backward" => ("#fde3cf", "#d0661c"),
        "optimizer step" => ("#d9f0dc", "#2e8b3e"),
        "validation" => ("#eeeeee", "#888888"),
        "barrier" => ("#f6d6d7", "#b8383d"),
        "reduce" | "all_reduce" => ("#e8dcf4", "#7048a8"),
        n if n.starts_with("late") => ("#ffffff", "#b8383d"),
        n if n.starts_with("all_reduce bucket") => ("#fff2b3", "#a07800"),
        // FSDP's unshard and its gradients' way out.
        "all_gather_into_tensor" => ("#d4eef0", "#1f8a94"),
        "reduce_scatter_tensor" => ("#f6dcea", "#a8487a"),
        _ => ("#e6e6e6", "#777777"),
    }
}

/// Ticks for `range` seconds: a round step giving about `want` ticks.
fn tick_step(range: f64, want: f64) -> f64 {
    let raw = range / want;
    let magnitude = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * magnitude).find(|s| *s >= raw).unwrap_or(10.0 * magnitude)
}

/// Maps seconds in `[t0, t1]` to `[x0, x1]`.
#[derive(Clone, Copy)]
pub(crate) struct Scale {
    pub(crate) t0: f64,
    pub(crate) t1: f64,
    pub(crate) x0: f64,
    pub(crate) x1: f64,
}

impl Scale {
    pub(crate) fn x(&self, t: f64) -> f64 {
        self.x0 + (t - self.t0) / (self.t1 - self.t0) * (self.x1 - self.x0)
    }

    /// The span's rectangle, clipped to the scale's window (None: outside it).
    pub(crate) fn clip(&self, s: &Span) -> Option<(f64, f64)> {
        if s.end < self.t0 || s.start > self.t1 {
            return None;
        }
        let (a, b) = (self.x(s.start.max(self.t0)), self.x(s.end.min(self.t1)));
        Some((a, (b - a).max(1.0)))
    }

    /// An axis under `y`, in seconds from `origin`, with round ticks.
    pub(crate) fn axis(&self, svg: &mut Svg, y: f64, origin: f64) {
        svg.line(self.x0, y, self.x1, y, &format!("stroke=\"{MUTED}\""));
        let step = tick_step(self.t1 - self.t0, 8.0);
        let mut k = ((self.t0 - origin) / step).ceil();
        while origin + k * step <= self.t1 + 1e-9 {
            let x = self.x(origin + k * step);
            svg.line(x, y, x, y + 4.0, &format!("stroke=\"{MUTED}\""));
            let label = format!("{} s", trim_zeros(&format!("{:.3}", k * step)));
            svg.text(x, y + 16.0, "small", "text-anchor=\"middle\"", &label);
            k += 1.0;
        }
    }
}

fn trim_zeros(s: &str) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s.to_string()
    }
}

/// Draws a span as a bar of height `h` at `y`, labelled when the label fits.
pub(crate) fn bar(svg: &mut Svg, scale: &Scale, s: &Span, y: f64, h: f64, label: &str) {
    let Some((x, w)) = scale.clip(s) else { return };
    let (fill, stroke) = colour(s);
    let dash = if s.name.starts_with("late") { " stroke-dasharray=\"4 3\"" } else { "" };
    svg.rect(x, y, w, h, &format!("fill=\"{fill}\" stroke=\"{stroke}\" stroke-width=\"1\"{dash}"));
    if !label.is_empty() && w > 6.5 * label.len() as f64 + 6.0 {
        svg.text(
            x + w / 2.0,
            y + h / 2.0 + 4.0,
            "small",
            "text-anchor=\"middle\" style=\"fill:#222222\"",
            label,
        );
    }
}

/// What a span is called on the figure.
fn label(s: &Span) -> String {
    match s.name.as_str() {
        "optimizer step" => "step".to_string(),
        "broadcast_coalesced" => String::new(),
        n if n.starts_with("late") => "late on purpose".to_string(),
        n if n.starts_with("all_reduce bucket") => n.trim_start_matches("all_reduce ").to_string(),
        n => n.to_string(),
    }
}

/// A size in MiB with one decimal, or in KiB below 1 MiB.
fn size(bytes: u64) -> String {
    if bytes < 1024 * 1024 {
        format!("{:.0} KiB", bytes as f64 / 1024.0)
    } else {
        format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
    }
}

/// The figure, from a merged trace of a 2-rank run of step 8 with one epoch.
pub fn timeline_figure(trace: &Value) -> Result<String, String> {
    let spans = spans(trace)?;
    let ranks: Vec<u64> = {
        let mut r: Vec<u64> = spans.iter().map(|s| s.rank).collect();
        r.sort_unstable();
        r.dedup();
        r
    };
    let epoch: Vec<&Span> = spans.iter().filter(|s| s.name == "epoch 0").collect();
    if epoch.len() != ranks.len() || ranks.len() < 2 {
        return Err(format!("the recorded trace needs epoch 0 on every rank of 2 or more; ranks {ranks:?}"));
    }
    let t0 = epoch.iter().map(|s| s.start).fold(f64::INFINITY, f64::min);
    let t1 = epoch.iter().map(|s| s.end).fold(0.0, f64::max);
    let per_rank_backward: Vec<Vec<&Span>> = ranks
        .iter()
        .map(|r| spans.iter().filter(|s| s.rank == *r && s.name == "backward").collect())
        .collect();
    let batches = per_rank_backward[0].len();
    // The magnified backward pass: the second (DDP regroups its buckets by the order
    // gradients arrived, in the second forward pass), or the only one.
    let shown = batches.min(2).saturating_sub(1);
    let zoomed: Vec<&Span> = per_rank_backward.iter().filter_map(|b| b.get(shown).copied()).collect();
    if zoomed.len() != ranks.len() {
        return Err("every rank needs the same number of backward passes".to_string());
    }
    let z0 = zoomed.iter().map(|s| s.start).fold(f64::INFINITY, f64::min);
    let z1 = zoomed.iter().map(|s| s.end).fold(0.0, f64::max);
    // The buckets reduced in it, with their sizes.
    let buckets: BTreeMap<u64, u64> = spans
        .iter()
        .filter(|s| s.lane >= 2 && s.start >= z0 && s.end <= z1 + 1e-3)
        .map(|s| (s.lane - 2, s.bytes.unwrap_or(0)))
        .collect();
    let n_buckets = buckets.len();

    let (width, x0, x1) = (900.0, 110.0, 880.0);
    let lane_h = 24.0;
    let rank_h = 2.0 * lane_h + 26.0;
    let top = 100.0;
    let zoom_top = top + rank_h * ranks.len() as f64 + 70.0;
    let zoom_rank_h = lane_h + 8.0 + 14.0 * n_buckets as f64 + 24.0;
    let height = zoom_top + zoom_rank_h * ranks.len() as f64 + 115.0;
    let mut svg = Svg::new(width, height, "Timeline of a 2-rank run of step 8: communication overlaps backward, and a rank waits at the barrier");
    svg.text(20.0, 30.0, "title", "", "What two ranks did in one epoch, from DDP_LAB_TIMELINE");
    let intro = [
        format!(
            "Step 8's solution, the lab's WideResNet, {} CPU ranks over Gloo, {batches} batches of 32 each; rank 1 made 1.5 s late at the",
            ranks.len()
        ),
        "end of its training (dashed: the checker's epoch-barrier probe). How it was recorded: tools/guide-figures/timelines/README.md.".to_string(),
    ];
    for (i, line) in intro.iter().enumerate() {
        svg.text(20.0, 50.0 + 15.0 * i as f64, "small", "", line);
    }

    // Top: the epoch.
    let scale = Scale { t0, t1, x0, x1 };
    for (i, rank) in ranks.iter().enumerate() {
        let y = top + rank_h * i as f64;
        svg.text(20.0, y + 15.0, "head", "", &format!("rank {rank}"));
        svg.text(20.0, y + 15.0 + lane_h, "small", "", "collectives");
        for s in spans.iter().filter(|s| s.rank == *rank) {
            match s.lane {
                0 if !s.name.starts_with("epoch") && s.name != "train" => {
                    bar(&mut svg, &scale, s, y, lane_h - 4.0, &label(s))
                }
                1 => bar(&mut svg, &scale, s, y + lane_h, lane_h - 4.0, &label(s)),
                _ => {}
            }
        }
        // Where rank 0 waits for the late rank.
        let waited = spans.iter().rev().find(|s| {
            s.rank == *rank && s.name == "barrier" && s.start >= t0 && s.end <= t1 && s.end - s.start > 0.5
        });
        if let Some(barrier) = waited {
            let (bx, bw) = scale.clip(barrier).unwrap_or((x0, 0.0));
            svg.text(
                bx + bw,
                y + 2.0 * lane_h + 12.0,
                "small",
                "text-anchor=\"end\" style=\"fill:#b8383d\"",
                &format!("waits {:.1} s at the barrier for the late rank", barrier.end - barrier.start),
            );
        }
    }
    let axis_y = top + rank_h * ranks.len() as f64 - 8.0;
    scale.axis(&mut svg, axis_y, t0);

    // Bottom: one backward pass of each rank, magnified, with the buckets.
    let pad = (z1 - z0) * 0.04;
    let zoom = Scale { t0: z0 - pad, t1: z1 + pad, x0, x1 };
    svg.text(
        20.0,
        zoom_top - 24.0,
        "head",
        "",
        &format!(
            "Backward pass {}, magnified: DDP's {n_buckets} bucket all-reduces run while backward goes on",
            shown + 1
        ),
    );
    for (i, rank) in ranks.iter().enumerate() {
        let y = zoom_top + zoom_rank_h * i as f64;
        svg.text(20.0, y + 15.0, "head", "", &format!("rank {rank}"));
        for s in spans
            .iter()
            .filter(|s| s.rank == *rank && s.lane == 0 && !s.name.starts_with("epoch") && s.name != "train")
        {
            bar(&mut svg, &zoom, s, y, lane_h - 4.0, &label(s));
        }
        for (b, bytes) in &buckets {
            let by = y + lane_h + 4.0 + 14.0 * *b as f64;
            svg.text(20.0, by + 10.0, "small", "", &format!("bucket {b}, {}", size(*bytes)));
            for s in spans
                .iter()
                .filter(|s| s.rank == *rank && s.lane == b + 2 && s.start >= z0 && s.end <= z1 + 1e-3)
            {
                bar(&mut svg, &zoom, s, by, 11.0, "");
            }
        }
    }
    let zoom_axis = zoom_top + zoom_rank_h * ranks.len() as f64 - 14.0;
    zoom.axis(&mut svg, zoom_axis, t0);
    svg.text(
        20.0,
        zoom_axis + 36.0,
        "small",
        "",
        "A bucket's all-reduce starts once its gradients are in and ends once every rank has sent its share: a rank ahead waits in it.",
    );

    // Legend.
    let legend_y = zoom_axis + 62.0;
    let items = [
        ("forward", "forward"),
        ("backward", "backward"),
        ("optimizer step", "optimizer step"),
        ("validation", "validation"),
        ("barrier", "barrier"),
        ("reduce", "reduce"),
        ("all_reduce bucket 0", "bucket all-reduce"),
        ("broadcast_coalesced", "buffers broadcast"),
    ];
    legend_row(&mut svg, &items, legend_y);
    svg.text(
        20.0,
        legend_y + 22.0,
        "small",
        &format!("style=\"fill:{INK}\""),
        "Open the trace itself in https://ui.perfetto.dev (or chrome://tracing) to zoom and read every event's arguments.",
    );
    Ok(svg.finish())
}

/// A row of legend swatches at `legend_y`: each span name's colours beside its text.
pub(crate) fn legend_row(svg: &mut Svg, items: &[(&str, &str)], legend_y: f64) {
    let mut x = 20.0;
    for (name, text) in items {
        let probe = Span { rank: 0, lane: 0, name: name.to_string(), start: 0.0, end: 0.0, bytes: None };
        let (fill, stroke) = colour(&probe);
        svg.rect(x, legend_y - 10.0, 12.0, 12.0, &format!("fill=\"{fill}\" stroke=\"{stroke}\""));
        svg.text(x + 17.0, legend_y, "small", "", text);
        x += 17.0 + 6.2 * text.len() as f64 + 16.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round() {
        assert_eq!(tick_step(10.0, 8.0), 2.0);
        assert_eq!(tick_step(0.3, 8.0), 0.05);
        assert_eq!(trim_zeros("1.500"), "1.5");
        assert_eq!(trim_zeros("2.000"), "2");
    }
}
