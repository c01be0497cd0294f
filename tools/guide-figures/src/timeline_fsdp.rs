//! `timeline-step-14-fsdp.svg`: one training step of a real 2-rank run of step 14
//! (`--fsdp`) as its timeline (`DDP_LAB_TIMELINE`) recorded it, from the merged trace
//! committed beside this crate (`timelines/step-14-fsdp.json`; `timelines/README.md`
//! says how it was recorded).
//!
//! Each rank on two lanes: forward, backward and the optimizer step above the
//! collectives `FullyShard` issued, the all-gathers (unshard) before each block's
//! forward and backward and the reduce-scatters of each block's gradients. Which block
//! a collective belongs to is not in the trace: the collectives of the step are matched
//! one by one against FSDP2's order ([`fsdp::fsdp_step`]) and their bytes against the
//! lab model's shards, so a recording that does not do what the guide says fails here.
use serde_json::Value;

use crate::fsdp::{self, Variable};
use crate::size;
use crate::timeline_figure::{self, bar, colour, spans, Scale, Span};
use guide_svg::{Svg, INK};

/// The recorded trace the figure is drawn from.
pub fn recorded_path() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("timelines/step-14-fsdp.json")
}

const ALL_GATHER: &str = "all_gather_into_tensor";
const REDUCE_SCATTER: &str = "reduce_scatter_tensor";

/// A collective of the step, with the FSDP unit it belongs to.
struct Collective<'a> {
    span: &'a Span,
    unit: &'static str,
    /// The unit's full parameters (or gradients): what the all-gather assembles, what
    /// the reduce-scatter reduces.
    full_bytes: u64,
}

/// The step's collectives of one rank, matched against FSDP2's order and the lab
/// model's shard sizes.
fn matched<'a>(
    steps: &[&'a Span],
    model: &[Variable],
    world_size: usize,
    rank: u64,
) -> Result<Vec<Collective<'a>>, String> {
    let (expected, _) = fsdp::fsdp_step(model, world_size);
    let expected: Vec<&fsdp::Event> = expected.iter().filter(|e| e.op == "AG" || e.op == "RS").collect();
    if let Some(other) = steps.iter().find(|s| s.name != ALL_GATHER && s.name != REDUCE_SCATTER) {
        return Err(format!(
            "rank {rank} issued {} during its training step: FSDP's step has only all-gathers and reduce-scatters \
             (no all-reduce of the model); re-record timelines/step-14-fsdp.json with step 14's solution",
            other.name
        ));
    }
    if steps.len() != expected.len() {
        return Err(format!(
            "rank {rank}'s training step has {} collectives, FSDP2's order {}: re-record timelines/step-14-fsdp.json",
            steps.len(),
            expected.len()
        ));
    }
    steps
        .iter()
        .zip(expected)
        .map(|(span, e)| {
            let full_bytes = 4 * fsdp::unit_gathered_numel(model, e.unit, world_size);
            // The trace counts a collective's input: a rank's shard for the all-gather,
            // the whole gradient for the reduce-scatter.
            let (name, input) = match e.op {
                "AG" => (ALL_GATHER, full_bytes / world_size as u64),
                _ => (REDUCE_SCATTER, full_bytes),
            };
            if span.name != name || span.bytes != Some(input) {
                return Err(format!(
                    "rank {rank}: {} of {:?} bytes where FSDP2 does the {} of {} ({input} bytes): the recorded run is not \
                     the lab's model at --width lab; re-record timelines/step-14-fsdp.json",
                    span.name, span.bytes, name, e.unit
                ));
            }
            Ok(Collective { span, unit: e.unit, full_bytes })
        })
        .collect()
}

/// Places labels left to right on up to `rows` rows, each on the first row where it
/// clears the previous label: returns each label's row.
fn label_rows(xs_widths: &[(f64, f64)], rows: usize) -> Vec<usize> {
    let mut ends = vec![f64::NEG_INFINITY; rows];
    xs_widths
        .iter()
        .map(|&(x, w)| {
            let row = (0..rows).find(|&r| ends[r] + 4.0 <= x).unwrap_or(rows - 1);
            ends[row] = x + w;
            row
        })
        .collect()
}

/// The figure, from a merged trace of a 2-rank `--fsdp` run of step 14 at the lab's
/// width, with one epoch of 2 or more batches.
pub fn fsdp_timeline_figure(trace: &Value, model: &[Variable]) -> Result<String, String> {
    let spans = spans(trace)?;
    let ranks: Vec<u64> = {
        let mut r: Vec<u64> = spans.iter().map(|s| s.rank).collect();
        r.sort_unstable();
        r.dedup();
        r
    };
    if ranks.len() < 2 {
        return Err(format!("the recorded FSDP trace needs 2 or more ranks; it has {ranks:?}"));
    }
    let world_size = ranks.len();
    let named = |rank: u64, name: &str| -> Vec<&Span> {
        spans.iter().filter(|s| s.rank == rank && s.lane == 0 && s.name == name).collect()
    };
    // The second step (the first one warms up), or the only one.
    let forwards: Vec<Vec<&Span>> = ranks.iter().map(|r| named(*r, "forward")).collect();
    let steps: Vec<Vec<&Span>> = ranks.iter().map(|r| named(*r, "optimizer step")).collect();
    let shown = forwards[0].len().min(2).saturating_sub(1);
    let mut windows = Vec::new();
    for (i, rank) in ranks.iter().enumerate() {
        match (forwards[i].get(shown), steps[i].get(shown)) {
            (Some(f), Some(s)) => windows.push((f.start, s.end)),
            _ => return Err(format!("rank {rank} has no training step {} in the recorded trace", shown + 1)),
        }
    }
    let mut per_rank = Vec::new();
    for (rank, (a, b)) in ranks.iter().zip(&windows) {
        let step: Vec<&Span> = spans
            .iter()
            .filter(|s| s.rank == *rank && s.lane == 1 && s.start >= *a && s.start <= *b)
            .collect();
        per_rank.push(matched(&step, model, world_size, *rank)?);
    }
    let t0 = windows.iter().map(|w| w.0).fold(f64::INFINITY, f64::min);
    let t1 = windows.iter().map(|w| w.1).fold(0.0, f64::max);

    let (width, x0, x1) = (900.0, 110.0, 880.0);
    let lane_h = 22.0;
    let row_h = 12.0;
    // Compute lane, rows of all-gather labels, collectives lane, rows of
    // reduce-scatter labels.
    const ROWS: usize = 4;
    let rows_h = ROWS as f64 * row_h;
    let rank_h = lane_h + 8.0 + rows_h + lane_h + rows_h + 22.0;
    let top = 112.0;
    let height = top + rank_h * world_size as f64 + 190.0;
    let mut svg = Svg::new(
        width,
        height,
        "Timeline of one FSDP training step on 2 ranks: all-gathers before each block's forward and backward, reduce-scatters of its gradients",
    );
    svg.text(20.0, 30.0, "title", "", "One training step of FSDP on two ranks, from DDP_LAB_TIMELINE");
    let intro = [
        format!(
            "Step 14's solution with --fsdp: the lab's WideResNet sharded per block (FullyShard), {world_size} CPU ranks over Gloo, one thread each;"
        ),
        format!(
            "training step {} of {} (batches of 32 per rank). How it was recorded: tools/guide-figures/timelines/README.md.",
            shown + 1,
            forwards[0].len()
        ),
        "Labels: the FSDP unit and its full parameters (what the all-gather assembles, what the reduce-scatter reduces).".to_string(),
    ];
    for (i, line) in intro.iter().enumerate() {
        svg.text(20.0, 50.0 + 15.0 * i as f64, "small", "", line);
    }

    // From the step's first forward; a little room after its optimizer step.
    let scale = Scale { t0, t1: t1 + (t1 - t0) * 0.02, x0, x1 };
    for (i, (rank, collectives)) in ranks.iter().zip(&per_rank).enumerate() {
        let y = top + rank_h * i as f64;
        svg.text(20.0, y + 15.0, "head", "", &format!("rank {rank}"));
        for s in spans.iter().filter(|s| s.rank == *rank && s.lane == 0) {
            if matches!(s.name.as_str(), "forward" | "backward" | "optimizer step") {
                let label = if s.name == "optimizer step" { "" } else { s.name.as_str() };
                bar(&mut svg, &scale, s, y, lane_h, label);
            }
        }
        let ag_rows_y = y + lane_h + 8.0;
        let lane_y = ag_rows_y + rows_h;
        let rs_rows_y = lane_y + lane_h;
        svg.text(20.0, lane_y + 15.0, "small", "", "collectives");
        for c in collectives {
            bar(&mut svg, &scale, c.span, lane_y, lane_h, "");
        }
        // Labels: all-gathers above the lane, reduce-scatters below.
        for (op, rows_y, above) in [(ALL_GATHER, ag_rows_y, true), (REDUCE_SCATTER, rs_rows_y, false)] {
            let these: Vec<&Collective> = collectives.iter().filter(|c| c.span.name == op).collect();
            let texts: Vec<String> = these
                .iter()
                .map(|c| format!("{} {}", c.unit.replace("block", "b"), size(c.full_bytes)))
                .collect();
            let places: Vec<(f64, f64)> = these
                .iter()
                .zip(&texts)
                .map(|(c, t)| {
                    // Ending at the bar where it would run off the right edge.
                    let (x, w) = (scale.x(c.span.start), 6.2 * t.len() as f64);
                    (if x + w > width - 4.0 { x - w } else { x }, w)
                })
                .collect();
            let rows = label_rows(&places, ROWS);
            for ((c, text), (&(tx, _), row)) in these.iter().zip(&texts).zip(places.iter().zip(rows)) {
                let x = scale.x(c.span.start);
                // Row 0 next to the lane, the others further out.
                let ty = if above {
                    rows_y + row_h * (ROWS - row) as f64 - 3.0
                } else {
                    rows_y + row_h * (row + 1) as f64
                };
                let (_, stroke) = colour(c.span);
                let lane_edge = if above { lane_y } else { lane_y + lane_h };
                let text_edge = if above { ty + 2.0 } else { ty - 9.0 };
                svg.line(x, lane_edge, x, text_edge, &format!("stroke=\"{stroke}\" stroke-width=\"0.8\""));
                svg.text(tx + if tx < x { -2.0 } else { 2.0 }, ty, "small", "", text);
            }
        }
    }
    let axis_y = top + rank_h * world_size as f64 - 10.0;
    scale.axis(&mut svg, axis_y, t0);

    // What to see.
    let notes = [
        "Forward: each unit's shards are all-gathered just before it computes (unshard), root first (stem and fc), then block1 to block6;",
        "each block's full parameters are freed after its forward (reshard), which costs no communication. Backward, in reverse: each block",
        "is all-gathered again, and once its gradients are in they are reduce-scattered, each rank keeping the sum of its own shard (then",
        "divided by 2); the root's gradients last. No all-reduce of the model: DDP's all-reduce is here a reduce-scatter of each block.",
    ];
    for (i, line) in notes.iter().enumerate() {
        svg.text(20.0, axis_y + 40.0 + 15.0 * i as f64, "small", "", line);
    }
    let legend_y = axis_y + 118.0;
    let items = [
        ("forward", "forward"),
        ("backward", "backward"),
        ("optimizer step", "optimizer step"),
        (ALL_GATHER, "all-gather (unshard)"),
        (REDUCE_SCATTER, "reduce-scatter (gradients)"),
    ];
    timeline_figure::legend_row(&mut svg, &items, legend_y);
    svg.text(
        20.0,
        legend_y + 22.0,
        "small",
        &format!("style=\"fill:{INK}\""),
        "Open the trace itself in https://ui.perfetto.dev to zoom and read every collective's bytes.",
    );
    Ok(svg.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_take_the_first_row_that_is_clear() {
        // The second label overlaps the first: row 1; the third clears row 0 again.
        assert_eq!(label_rows(&[(0.0, 50.0), (20.0, 50.0), (60.0, 10.0)], 2), vec![0, 1, 0]);
        // No row clear: the last row.
        assert_eq!(label_rows(&[(0.0, 50.0), (1.0, 50.0), (2.0, 50.0)], 2), vec![0, 1, 1]);
    }

    #[test]
    fn the_recorded_step_is_fsdp2s_order() {
        let trace: Value = serde_json::from_str(&std::fs::read_to_string(recorded_path()).unwrap()).unwrap();
        let model = fsdp::lab_model();
        assert!(fsdp_timeline_figure(&trace, &model).is_ok());
        // An all-reduce slipped into the step is refused, named.
        let mut bad = trace.clone();
        let events = bad["traceEvents"].as_array_mut().unwrap();
        for e in events.iter_mut().filter(|e| e["name"] == REDUCE_SCATTER) {
            e["name"] = "all_reduce".into();
        }
        let err = fsdp_timeline_figure(&bad, &model).unwrap_err();
        assert!(err.contains("issued all_reduce"), "{err}");
    }
}
