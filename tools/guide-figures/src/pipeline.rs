//! `pipeline-schedule.svg`: GPipe's schedule of one training step, a model cut into
//! `S` stages (one per device) and its batch into `M` micro-batches, with the slots
//! where a device has nothing to do shaded.
//!
//! The schedule is worked out from its dependencies, not drawn from the formula: a
//! stage runs a micro-batch's forward once the previous stage has handed it the
//! activations and it has finished its previous micro-batch; backward starts on the
//! last stage once every forward is done (GPipe flushes the pipeline), and runs back
//! through the stages the same way. The idle share that comes out of it is the
//! bubble `(S − 1) / (M + S − 1)`, which the tests check.
use guide_svg::{Svg, RANK_FILL, RANK_STROKE};

/// Forward or backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    Forward,
    Backward,
}

/// One stage's work on one micro-batch, in units of one micro-batch's forward on one
/// stage.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Slot {
    pub stage: usize,
    pub micro_batch: usize,
    pub pass: Pass,
    pub start: f64,
    pub end: f64,
}

/// GPipe's schedule of one step: `stages` devices, `micro_batches` micro-batches, a
/// backward that takes `backward_cost` times as long as a forward (about 2 for
/// convolutions). Micro-batches go forward in order 0, 1, …, and come back in the
/// same order.
pub fn gpipe_schedule(stages: usize, micro_batches: usize, backward_cost: f64) -> Vec<Slot> {
    assert!(stages > 0 && micro_batches > 0, "a pipeline has at least one stage and one micro-batch");
    // forward_end[s][m]: when stage s has finished micro-batch m's forward.
    let mut forward_end = vec![vec![0.0f64; micro_batches]; stages];
    let mut slots = Vec::new();
    for s in 0..stages {
        for m in 0..micro_batches {
            let input_ready = if s == 0 { 0.0 } else { forward_end[s - 1][m] };
            let stage_free = if m == 0 { 0.0 } else { forward_end[s][m - 1] };
            let start = input_ready.max(stage_free);
            forward_end[s][m] = start + 1.0;
            slots.push(Slot { stage: s, micro_batch: m, pass: Pass::Forward, start, end: start + 1.0 });
        }
    }
    // The flush: no backward before the last forward of the last stage.
    let flush = forward_end[stages - 1][micro_batches - 1];
    let mut backward_end = vec![vec![0.0f64; micro_batches]; stages];
    for s in (0..stages).rev() {
        for m in 0..micro_batches {
            let grad_ready = if s == stages - 1 { flush } else { backward_end[s + 1][m] };
            let stage_free = if m == 0 { forward_end[s][micro_batches - 1] } else { backward_end[s][m - 1] };
            let start = grad_ready.max(stage_free);
            let end = start + backward_cost;
            backward_end[s][m] = end;
            slots.push(Slot { stage: s, micro_batch: m, pass: Pass::Backward, start, end });
        }
    }
    slots
}

/// The step's length: when the first stage has finished the last backward.
pub fn makespan(slots: &[Slot]) -> f64 {
    slots.iter().map(|s| s.end).fold(0.0, f64::max)
}

/// The share of the devices' time spent idle over the step (the bubble), measured on
/// the schedule.
pub fn idle_share(slots: &[Slot], stages: usize) -> f64 {
    let busy: f64 = slots.iter().map(|s| s.end - s.start).sum();
    1.0 - busy / (makespan(slots) * stages as f64)
}

/// GPipe's bubble, `(S − 1) / (M + S − 1)`.
pub fn bubble_formula(stages: usize, micro_batches: usize) -> f64 {
    (stages - 1) as f64 / (micro_batches + stages - 1) as f64
}

/// The figure's pipelines: 4 stages, the whole batch at once, then 4 micro-batches.
const STAGES: usize = 4;
const PANELS: [usize; 2] = [1, 4];
/// Backward costs about twice the forward (two matrix products per layer instead of one).
const BACKWARD_COST: f64 = 2.0;

/// The schedule of 4 stages with 1 and with 4 micro-batches, drawn to one time scale.
pub fn schedule_figure() -> String {
    let (width, x0, right) = (760.0, 110.0, 740.0);
    let lane = 26.0;
    let panel_h = 58.0 + lane * STAGES as f64;
    let height = 96.0 + panel_h * PANELS.len() as f64 + 76.0;
    let mut svg = Svg::new(
        width,
        height,
        "GPipe's schedule on 4 stages, with the whole batch and with 4 micro-batches; idle time shaded",
    );
    svg.text(
        20.0,
        32.0,
        "title",
        "",
        "A pipeline of 4 stages: the whole batch, then 4 micro-batches (GPipe)",
    );
    svg.text(
        20.0,
        52.0,
        "small",
        "",
        "F = forward, B = backward of a micro-batch (backward taken as 2 × forward); shaded: the device waits.",
    );
    svg.text(
        20.0,
        67.0,
        "small",
        "",
        "Worked out from the dependencies by tools/guide-figures (src/pipeline.rs); the two steps to scale at the bottom.",
    );
    // Each panel spreads its step over the width; the bar at the bottom compares the
    // steps' lengths to scale (one unit = the whole batch's forward on one stage, so a
    // micro-batch's forward on one stage takes 1/M of it).
    let steps: Vec<f64> =
        PANELS.iter().map(|&m| makespan(&gpipe_schedule(STAGES, m, BACKWARD_COST)) / m as f64).collect();
    for (p, &micro_batches) in PANELS.iter().enumerate() {
        let slots = gpipe_schedule(STAGES, micro_batches, BACKWARD_COST);
        let span = makespan(&slots);
        let scale = (right - x0) / span;
        let y0 = 96.0 + panel_h * p as f64;
        let bubble = idle_share(&slots, STAGES);
        let head = if micro_batches == 1 {
            "The whole batch (model parallelism as first written): one device works at a time".to_string()
        } else {
            format!("{micro_batches} micro-batches: the stages work on different micro-batches at once")
        };
        svg.text(20.0, y0, "head", "", &head);
        svg.text(
            20.0,
            y0 + 17.0,
            "small",
            "",
            &format!(
                "idle share (bubble) {:.0}% = (S − 1) / (M + S − 1) = {} / {}; the step takes {} units",
                100.0 * bubble,
                STAGES - 1,
                micro_batches + STAGES - 1,
                trim(steps[p])
            ),
        );
        for s in 0..STAGES {
            let y = y0 + 28.0 + lane * s as f64;
            svg.text(20.0, y + 17.0, "body", "", &format!("stage {s}"));
            // The whole lane shaded as idle, the work drawn over it.
            svg.rect(
                x0,
                y,
                span * scale,
                lane - 4.0,
                "fill=\"#eeeeee\" stroke=\"#bbbbbb\" stroke-width=\"1\"",
            );
            for slot in slots.iter().filter(|t| t.stage == s) {
                let (x, w) = (x0 + slot.start * scale, (slot.end - slot.start) * scale);
                let k = slot.micro_batch % 4;
                let (fill, dash) = match slot.pass {
                    Pass::Forward => (RANK_FILL[k], ""),
                    Pass::Backward => ("#ffffff", " stroke-dasharray=\"4 2\""),
                };
                svg.rect(
                    x,
                    y,
                    w,
                    lane - 4.0,
                    &format!("fill=\"{fill}\" stroke=\"{}\" stroke-width=\"1.5\"{dash}", RANK_STROKE[k]),
                );
                let letter = if slot.pass == Pass::Forward { "F" } else { "B" };
                let label = if micro_batches == 1 {
                    letter.to_string()
                } else {
                    format!("{letter}{}", slot.micro_batch)
                };
                svg.text(x + w / 2.0, y + 16.0, "cell", "", &label);
            }
        }
    }
    // The two steps to scale.
    let longest = steps.iter().copied().fold(0.0, f64::max);
    for (p, &micro_batches) in PANELS.iter().enumerate() {
        let y = height - 66.0 + 16.0 * p as f64;
        let w = (right - x0 - 120.0) * steps[p] / longest;
        svg.rect(x0, y - 10.0, w, 10.0, &format!("fill=\"{}\" stroke=\"{}\"", RANK_FILL[p], RANK_STROKE[p]));
        svg.text(x0 + w + 6.0, y, "small", "", &format!("M = {micro_batches}: {} units", trim(steps[p])));
    }
    svg.text(20.0, height - 58.0, "small", "", "steps to scale");
    let table: Vec<String> = [1, 2, 4, 8, 16, 32]
        .iter()
        .map(|&m| format!("M = {m}: {:.0}%", 100.0 * bubble_formula(STAGES, m)))
        .collect();
    svg.text(20.0, height - 24.0, "small", "", &format!("Bubble on 4 stages: {}", table.join(", ")));
    svg.finish()
}

/// 3.5 -> "3.5", 8.0 -> "8".
fn trim(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedules_idle_share_is_gpipes_bubble() {
        for stages in 1..=6 {
            for micro_batches in 1..=12 {
                for backward_cost in [1.0, 2.0, 3.0] {
                    let slots = gpipe_schedule(stages, micro_batches, backward_cost);
                    let measured = idle_share(&slots, stages);
                    let formula = bubble_formula(stages, micro_batches);
                    assert!(
                        (measured - formula).abs() < 1e-12,
                        "S={stages} M={micro_batches} b={backward_cost}: {measured} against {formula}"
                    );
                    // (M + S − 1) forward slots, then as many backward ones.
                    let expected = (micro_batches + stages - 1) as f64 * (1.0 + backward_cost);
                    assert!((makespan(&slots) - expected).abs() < 1e-12);
                }
            }
        }
    }

    #[test]
    fn every_dependency_is_respected_and_no_stage_does_two_things_at_once() {
        let (stages, micro_batches) = (4, 4);
        let slots = gpipe_schedule(stages, micro_batches, BACKWARD_COST);
        assert_eq!(slots.len(), 2 * stages * micro_batches);
        let find = |s: usize, m: usize, p: Pass| {
            *slots.iter().find(|t| t.stage == s && t.micro_batch == m && t.pass == p).unwrap()
        };
        let last_forward =
            slots.iter().filter(|t| t.pass == Pass::Forward).map(|t| t.end).fold(0.0, f64::max);
        for m in 0..micro_batches {
            for s in 1..stages {
                assert!(find(s, m, Pass::Forward).start >= find(s - 1, m, Pass::Forward).end);
                assert!(find(s - 1, m, Pass::Backward).start >= find(s, m, Pass::Backward).end);
            }
            assert!(find(stages - 1, m, Pass::Backward).start >= last_forward, "GPipe flushes first");
        }
        for s in 0..stages {
            let mut own: Vec<Slot> = slots.iter().filter(|t| t.stage == s).copied().collect();
            own.sort_by(|a, b| a.start.total_cmp(&b.start));
            assert!(own.windows(2).all(|w| w[1].start >= w[0].end), "stage {s} overlaps itself");
        }
    }

    #[test]
    fn the_figure_states_the_measured_bubbles() {
        let figure = schedule_figure();
        // 4 stages: 3/4 with the whole batch, 3/7 with 4 micro-batches.
        assert!(figure.contains("idle share (bubble) 75% = (S − 1) / (M + S − 1) = 3 / 4"), "{figure}");
        assert!(figure.contains("idle share (bubble) 43% = (S − 1) / (M + S − 1) = 3 / 7"), "{figure}");
        assert!(figure.contains("M = 32: 9%"), "{figure}");
    }
}
