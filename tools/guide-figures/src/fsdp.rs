//! The FSDP figures, from the lab's WideResNet's real parameter shapes:
//!
//! - `fsdp-bytes.svg`: the bytes each rank holds, DDP beside FSDP on 2 and 4 ranks;
//! - `fsdp-unshard.svg`: one training step of FSDP on 2 ranks, block by block: the
//!   all-gathers (unshard) before each block's forward and backward, the frees
//!   (reshard) after, the reduce-scatters of the gradients, and the parameters rank 0
//!   holds meanwhile.
//!
//! Sharding as PyTorch's FSDP2 (`fully_shard`) does it: each parameter is cut along
//! dim 0 as `torch.chunk(param, world_size, dim=0)` cuts it, rank `r` keeps chunk `r`,
//! and every rank's chunk is padded with zeros to the size of chunk 0 so that the
//! collectives see equal sizes. `fully_shard` is applied to each of the six blocks
//! and then to the root, which keeps what no block owns (the stem and the classifier).
//! Buffers (BatchNorm's running statistics) are not sharded: every rank keeps them.
use tch::nn;

use crate::{group_thousands, size};
use guide_svg::{Svg, INK, MUTED, RANK_FILL, RANK_STROKE};

/// One variable of the model.
#[derive(Debug, Clone, PartialEq)]
pub struct Variable {
    pub name: String,
    pub shape: Vec<i64>,
    /// A parameter (trained) rather than a buffer (BatchNorm's running statistics).
    pub trainable: bool,
}

impl Variable {
    pub fn numel(&self) -> u64 {
        self.shape.iter().product::<i64>() as u64
    }

    /// The FSDP unit that owns it: its block (`block1` … `block6`) or the root.
    pub fn unit(&self) -> &str {
        let module = self.name.split('.').next().unwrap_or_default();
        if module.starts_with("block") {
            module
        } else {
            "root"
        }
    }
}

/// Every variable of the lab's WideResNet at `--width lab`, as labkit builds it, sorted
/// by name.
pub fn lab_model() -> Vec<Variable> {
    let vs = nn::VarStore::new(tch::Device::Cpu);
    let _model = labkit::WideResNet::new(&vs.root(), labkit::Widths::LAB, labkit::Norm::BatchNorm);
    let trainable: Vec<String> = {
        let mut names = Vec::new();
        for (name, t) in vs.variables() {
            if t.requires_grad() {
                names.push(name);
            }
        }
        names
    };
    let mut variables: Vec<Variable> = vs
        .variables()
        .into_iter()
        .map(|(name, t)| Variable { trainable: trainable.contains(&name), shape: t.size(), name })
        .collect();
    variables.sort_by(|a, b| a.name.cmp(&b.name));
    variables
}

/// What rank `rank` of `world_size` keeps of one parameter under FSDP2's dim-0 sharding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// Elements of chunk `rank` of `torch.chunk(param, world_size, 0)` (0 where the
    /// chunks run out before the ranks do).
    pub numel: u64,
    /// Elements after padding to chunk 0's size: what the rank allocates and what it
    /// puts into the all-gather.
    pub padded_numel: u64,
}

/// Rank `rank`'s shard of a parameter of `shape` over `world_size` ranks.
///
/// `torch.chunk` makes chunks of `ceil(rows / world_size)` rows, the last one shorter,
/// and fewer chunks than ranks when rows run out: `[10, 640]` over 4 ranks is 3, 3, 3
/// and 1 rows, padded to 3 each.
pub fn dim0_shard(shape: &[i64], world_size: usize, rank: usize) -> Shard {
    assert!(rank < world_size, "rank {rank} is not a rank of a group of {world_size}");
    let (rows, rest) = match shape.split_first() {
        Some((&rows, rest)) => (rows as u64, rest.iter().product::<i64>() as u64),
        None => (1, 1), // a scalar is one row
    };
    let chunk_rows = rows.div_ceil(world_size as u64);
    let start = chunk_rows * rank as u64;
    let own_rows = rows.saturating_sub(start).min(chunk_rows);
    Shard { numel: own_rows * rest, padded_numel: chunk_rows * rest }
}

const FP32: u64 = 4;

/// The bytes one rank holds for the whole step, by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RankBytes {
    /// Parameters (padded shards under FSDP).
    pub parameters: u64,
    /// Gradients, as large as the parameters they belong to.
    pub gradients: u64,
    /// DDP's gradient buckets: libtorch's Reducer keeps the gradients a second time,
    /// flattened, to all-reduce them (the lab's default, `gradient_as_bucket_view`
    /// off). FSDP has none.
    pub buckets: u64,
    /// The optimizer's per-parameter state. The lab's SGD has no momentum, so none; with
    /// momentum it would equal the parameters (sharded under FSDP).
    pub optimizer: u64,
    /// BatchNorm's running statistics, which every rank keeps whole.
    pub buffers: u64,
}

impl RankBytes {
    pub fn total(&self) -> u64 {
        self.parameters + self.gradients + self.buckets + self.optimizer + self.buffers
    }
}

fn buffer_bytes(model: &[Variable]) -> u64 {
    FP32 * model.iter().filter(|v| !v.trainable).map(Variable::numel).sum::<u64>()
}

/// What every DDP rank holds: the whole model, its gradients and their buckets.
pub fn ddp_rank_bytes(model: &[Variable]) -> RankBytes {
    let parameters = FP32 * model.iter().filter(|v| v.trainable).map(Variable::numel).sum::<u64>();
    RankBytes {
        parameters,
        gradients: parameters,
        buckets: parameters,
        optimizer: 0,
        buffers: buffer_bytes(model),
    }
}

/// What rank `rank` of `world_size` holds between steps under FSDP.
pub fn fsdp_rank_bytes(model: &[Variable], world_size: usize, rank: usize) -> RankBytes {
    let parameters = FP32
        * model
            .iter()
            .filter(|v| v.trainable)
            .map(|v| dim0_shard(&v.shape, world_size, rank).padded_numel)
            .sum::<u64>();
    RankBytes { parameters, gradients: parameters, buckets: 0, optimizer: 0, buffers: buffer_bytes(model) }
}

/// Elements of the unit's parameters unsharded (what its all-gather produces: padded
/// shards × world size).
pub fn unit_gathered_numel(model: &[Variable], unit: &str, world_size: usize) -> u64 {
    model
        .iter()
        .filter(|v| v.trainable && v.unit() == unit)
        .map(|v| dim0_shard(&v.shape, world_size, 0).padded_numel * world_size as u64)
        .sum()
}

const BLOCKS: [&str; 6] = ["block1", "block2", "block3", "block4", "block5", "block6"];

/// The largest block and its unsharded parameters' bytes.
fn largest_block(model: &[Variable], world_size: usize) -> (&'static str, u64) {
    BLOCKS
        .iter()
        .map(|b| (*b, FP32 * unit_gathered_numel(model, b, world_size)))
        .max_by_key(|(_, bytes)| *bytes)
        .expect("six blocks")
}

/// One kind of bytes in [`bytes_figure`]'s bars.
struct Segment {
    label: &'static str,
    fill: &'static str,
    stroke: &'static str,
    bytes: fn(&RankBytes) -> u64,
}

/// DDP beside FSDP on 2 and 4 ranks: bytes per rank by kind.
pub fn bytes_figure(model: &[Variable]) -> String {
    let parameters: u64 = model.iter().filter(|v| v.trainable).map(Variable::numel).sum();
    let ddp = ddp_rank_bytes(model);
    let rows: Vec<(String, RankBytes, Option<usize>)> = vec![
        ("DDP, any number of ranks".to_string(), ddp, None),
        ("FSDP, 2 ranks".to_string(), fsdp_rank_bytes(model, 2, 0), Some(2)),
        ("FSDP, 4 ranks".to_string(), fsdp_rank_bytes(model, 4, 0), Some(4)),
    ];
    let (width, x0, right) = (760.0, 200.0, 640.0);
    let height = 452.0;
    let mut svg =
        Svg::new(width, height, "Bytes per rank of the lab's WideResNet: DDP beside FSDP on 2 and 4 ranks");
    svg.text(20.0, 32.0, "title", "", "What each rank holds: DDP beside FSDP (the lab's WideResNet, fp32)");
    svg.text(
        20.0,
        52.0,
        "small",
        "",
        &format!(
            "{} parameters at --width lab, sharded as FSDP2 does (dim 0, torch.chunk, padded); computed from labkit's model",
            group_thousands(parameters)
        ),
    );
    svg.text(
        20.0,
        67.0,
        "small",
        "",
        "by tools/guide-figures (src/fsdp.rs). Bars: what a rank keeps between steps.",
    );
    let kinds = [
        Segment { label: "parameters", fill: RANK_FILL[0], stroke: RANK_STROKE[0], bytes: |b| b.parameters },
        Segment { label: "gradients", fill: RANK_FILL[1], stroke: RANK_STROKE[1], bytes: |b| b.gradients },
        Segment {
            label: "optimizer state",
            fill: RANK_FILL[2],
            stroke: RANK_STROKE[2],
            bytes: |b| b.optimizer,
        },
        Segment {
            label: "DDP's buckets (a copy of the gradients)",
            fill: RANK_FILL[3],
            stroke: RANK_STROKE[3],
            bytes: |b| b.buckets,
        },
        Segment {
            label: "BatchNorm buffers (kept whole)",
            fill: "#eeeeee",
            stroke: "#888888",
            bytes: |b| b.buffers,
        },
    ];
    let scale = (right - x0) / ddp.total() as f64;
    for (i, (label, bytes, world)) in rows.iter().enumerate() {
        let y = 90.0 + 56.0 * i as f64;
        svg.text(20.0, y + 20.0, "body", "", label);
        let mut x = x0;
        for Segment { fill, stroke, bytes: get, .. } in &kinds {
            let w = get(bytes) as f64 * scale;
            if w > 0.0 {
                svg.rect(x, y, w, 30.0, &format!("fill=\"{fill}\" stroke=\"{stroke}\" stroke-width=\"1.5\""));
                if w > 60.0 {
                    svg.text(x + w / 2.0, y + 20.0, "cell", "", &size(get(bytes)));
                }
                x += w;
            }
        }
        let note = match world {
            None => format!("{} in all", size(bytes.total())),
            Some(_) => format!(
                "{} in all, {:.0}% of DDP's",
                size(bytes.total()),
                100.0 * bytes.total() as f64 / ddp.total() as f64
            ),
        };
        svg.text(x + 6.0, y + 20.0, "small", "", &note);
        if let Some(n) = world {
            let (block, full) = largest_block(model, *n);
            svg.text(
                x0,
                y + 44.0,
                "small",
                "",
                &format!(
                    "+ while a block runs, its full parameters (and in backward gradients): up to {} ({block})",
                    size(full)
                ),
            );
        }
    }
    // The legend.
    let mut y = 278.0;
    for Segment { label, fill, stroke, .. } in &kinds {
        svg.rect(20.0, y - 11.0, 12.0, 12.0, &format!("fill=\"{fill}\" stroke=\"{stroke}\""));
        svg.text(40.0, y, "body", "", label);
        y += 20.0;
    }
    svg.text(
        20.0,
        y + 6.0,
        "body",
        "",
        "Optimizer state: none here. The lab's SGD has no momentum; with momentum (or Adam's two moments)",
    );
    svg.text(
        20.0,
        y + 24.0,
        "body",
        "",
        "each rank would keep one (two) more copies of its parameters: whole under DDP, a shard under FSDP.",
    );
    let pad4: u64 = model
        .iter()
        .filter(|v| v.trainable)
        .map(|v| dim0_shard(&v.shape, 4, 3).padded_numel - dim0_shard(&v.shape, 4, 3).numel)
        .sum();
    svg.text(
        20.0,
        y + 50.0,
        "small",
        "",
        &format!(
            "Padding: none on 2 ranks; on 4, fc (10 rows) is cut 3, 3, 3, 1, so rank 3 pads {} elements. Every FSDP rank allocates the same.",
            group_thousands(pad4)
        ),
    );
    svg.text(20.0, y + 66.0, "small", "", "Not drawn: activations, the same per image under both.");
    svg.finish()
}

/// One event of an FSDP step on one rank.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// "AG" (all-gather: unshard), "F" (forward), "B" (backward), "RS" (reduce-scatter).
    pub op: &'static str,
    /// The unit: `root` (stem and fc) or a block.
    pub unit: &'static str,
    /// Which layers compute (for F and B): `stem`, `fc` or the block.
    pub layers: &'static str,
    /// Bytes of parameters rank 0 holds while the event runs.
    pub held: u64,
}

/// One training step of FSDP2 over `world_size` ranks, as rank 0 sees it: the root is
/// all-gathered first and kept through the step (FSDP2 does not reshard the root
/// after forward: backward needs it at once); each block is all-gathered before its
/// forward and freed after it, all-gathered again before its backward, its gradients
/// reduce-scattered and the block freed after it.
pub fn fsdp_step(model: &[Variable], world_size: usize) -> (Vec<Event>, u64) {
    let shards = fsdp_rank_bytes(model, world_size, 0).parameters;
    let full = |unit: &str| FP32 * unit_gathered_numel(model, unit, world_size);
    // A gathered unit holds its full parameters; its shard stays allocated beside them.
    let mut gathered: u64 = 0;
    let mut events = Vec::new();
    let push = |events: &mut Vec<Event>, op, unit, layers, gathered: u64| {
        events.push(Event { op, unit, layers, held: shards + gathered });
    };
    gathered += full("root");
    push(&mut events, "AG", "root", "", gathered);
    push(&mut events, "F", "root", "stem", gathered);
    for block in BLOCKS {
        gathered += full(block);
        push(&mut events, "AG", block, "", gathered);
        push(&mut events, "F", block, block, gathered);
        gathered -= full(block); // resharded after its forward
    }
    push(&mut events, "F", "root", "fc", gathered);
    push(&mut events, "B", "root", "fc", gathered);
    for block in BLOCKS.iter().rev() {
        gathered += full(block);
        push(&mut events, "AG", block, "", gathered);
        push(&mut events, "B", block, block, gathered);
        gathered -= full(block); // resharded after its backward, as its gradients leave
        push(&mut events, "RS", block, "", gathered);
    }
    push(&mut events, "B", "root", "stem", gathered);
    gathered -= full("root");
    push(&mut events, "RS", "root", "", gathered);
    (events, shards)
}

/// One step of FSDP on 2 ranks: unshard and reshard around each block, and what rank 0
/// holds meanwhile.
pub fn unshard_figure(model: &[Variable]) -> String {
    const WORLD: usize = 2;
    let (events, shards) = fsdp_step(model, WORLD);
    let ddp = ddp_rank_bytes(model).parameters;
    let forward_len = events.iter().position(|e| e.op == "B").expect("a backward");
    let passes = [("forward", &events[..forward_len]), ("backward", &events[forward_len..])];
    let (width, x0, right) = (760.0, 110.0, 740.0);
    let pass_h = 184.0;
    let height = 96.0 + pass_h * 2.0 + 40.0;
    let mut svg = Svg::new(
        width,
        height,
        "FSDP on 2 ranks: each block unsharded before its forward and backward, resharded after",
    );
    svg.text(20.0, 32.0, "title", "", "FSDP, one step on 2 ranks: unshard before each block, reshard after");
    svg.text(
        20.0,
        52.0,
        "small",
        "",
        "AG = all-gather the block's shards (unshard); F/B = its forward/backward; RS = reduce-scatter its gradients, averaged.",
    );
    svg.text(
        20.0,
        67.0,
        "small",
        "",
        "After F and after RS the block's full parameters are freed (reshard). The root (stem, fc) stays gathered for the step.",
    );
    svg.text(
        20.0,
        82.0,
        "small",
        "",
        "Drawn from labkit's WideResNet at --width lab by tools/guide-figures (src/fsdp.rs); one slot per event, not to time.",
    );
    let most = events.iter().map(|e| e.held).max().unwrap_or(0).max(ddp) as f64;
    for (p, (name, run)) in passes.iter().enumerate() {
        let y0 = 104.0 + pass_h * p as f64;
        let slot = (right - x0) / run.len() as f64;
        svg.text(20.0, y0 + 20.0, "head", "", name);
        svg.text(20.0, y0 + 40.0, "small", "", "compute");
        svg.text(20.0, y0 + 68.0, "small", "", "collectives");
        for (i, e) in run.iter().enumerate() {
            let x = x0 + slot * i as f64;
            let k = BLOCKS.iter().position(|b| *b == e.unit).map_or(0, |b| b % 3 + 1);
            let (fill, stroke) =
                if e.unit == "root" { ("#eeeeee", "#888888") } else { (RANK_FILL[k], RANK_STROKE[k]) };
            let (y, label) = match e.op {
                "F" | "B" => (y0 + 26.0, format!("{}{}", e.op, short(e.layers))),
                _ => (y0 + 54.0, format!("{}{}", e.op, short(e.unit))),
            };
            let dash = if e.op == "RS" { " stroke-dasharray=\"4 2\"" } else { "" };
            svg.rect(
                x + 1.0,
                y,
                slot - 2.0,
                22.0,
                &format!("fill=\"{fill}\" stroke=\"{stroke}\" stroke-width=\"1.5\"{dash}"),
            );
            svg.text(x + slot / 2.0, y + 15.0, "small", "text-anchor=\"middle\"", &label);
        }
        // What rank 0 holds of the parameters while each event runs.
        let (ybase, h) = (y0 + 156.0, 68.0);
        let to_y = |bytes: u64| ybase - h * bytes as f64 / most;
        svg.text(20.0, ybase - h + 20.0, "small", "", "parameters");
        svg.text(20.0, ybase - h + 34.0, "small", "", "held by rank 0");
        svg.line(x0, ybase, right, ybase, &format!("stroke=\"{MUTED}\""));
        svg.line(x0, to_y(ddp), right, to_y(ddp), &format!("stroke=\"{INK}\" stroke-dasharray=\"5 4\""));
        let stroke = format!("stroke=\"{}\" stroke-width=\"2\"", RANK_STROKE[0]);
        let mut before = run[0].held;
        for (i, e) in run.iter().enumerate() {
            let x = x0 + slot * i as f64;
            svg.line(x, to_y(before), x, to_y(e.held), &stroke);
            svg.line(x, to_y(e.held), x + slot, to_y(e.held), &stroke);
            before = e.held;
        }
        let peak = run.iter().max_by_key(|e| e.held).expect("events");
        svg.text(
            x0,
            ybase + 14.0,
            "small",
            "",
            &format!(
                "dashed: DDP holds {} all the time; here at most {}: the shards ({}) + the root + {}",
                size(ddp),
                size(peak.held),
                size(shards),
                peak.unit
            ),
        );
    }
    svg.text(
        20.0,
        height - 18.0,
        "small",
        "",
        "Gradients (not drawn) follow the same pattern in backward: a block's full gradients until its RS, then its shard.",
    );
    svg.finish()
}

/// "block3" -> "3", "stem" -> "s", "fc" -> "fc", "root" -> "r".
fn short(name: &str) -> String {
    match name {
        "stem" => "s".to_string(),
        "root" => "r".to_string(),
        "fc" => "fc".to_string(),
        other => other.trim_start_matches("block").to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_follow_torch_chunk_and_pad_to_chunk_zero() {
        // [10, 640] over 4: 3, 3, 3, 1 rows, each padded to 3.
        let rows: Vec<u64> = (0..4).map(|r| dim0_shard(&[10, 640], 4, r).numel / 640).collect();
        assert_eq!(rows, [3, 3, 3, 1]);
        assert!((0..4).all(|r| dim0_shard(&[10, 640], 4, r).padded_numel == 3 * 640));
        // torch.chunk runs out of rows before the ranks: 5 rows over 4 are 2, 2, 1 and nothing.
        let rows: Vec<u64> = (0..4).map(|r| dim0_shard(&[5], 4, r).numel).collect();
        assert_eq!(rows, [2, 2, 1, 0]);
        // Even cuts need no padding.
        assert_eq!(
            dim0_shard(&[640, 320, 3, 3], 2, 1),
            Shard { numel: 320 * 320 * 9, padded_numel: 320 * 320 * 9 }
        );
    }

    #[test]
    fn the_shards_are_the_lab_models_parameters() {
        let model = lab_model();
        let parameters: u64 = model.iter().filter(|v| v.trainable).map(Variable::numel).sum();
        assert_eq!(parameters, 17_117_466, "the lab's WideResNet at --width lab");
        let vs = nn::VarStore::new(tch::Device::Cpu);
        let _m = labkit::WideResNet::new(&vs.root(), labkit::Widths::LAB, labkit::Norm::BatchNorm);
        assert_eq!(parameters as i64, labkit::parameter_count(&vs));
        for world in [2, 3, 4, 8] {
            let held: u64 = (0..world)
                .flat_map(|r| {
                    model.iter().filter(|v| v.trainable).map(move |v| dim0_shard(&v.shape, world, r).numel)
                })
                .sum();
            assert_eq!(held, parameters, "the ranks' shards over {world} ranks are the model, once");
            let padded = fsdp_rank_bytes(&model, world, 0).parameters;
            assert!(
                (0..world).all(|r| fsdp_rank_bytes(&model, world, r).parameters == padded),
                "equal sizes"
            );
            assert!(padded * world as u64 >= 4 * parameters);
        }
        // The lab's widths divide by 2: exactly half each; on 4 only fc pads (2 rows of 640, one of 10's bias).
        assert_eq!(fsdp_rank_bytes(&model, 2, 0).parameters, 4 * parameters / 2);
        assert_eq!(4 * fsdp_rank_bytes(&model, 4, 0).parameters, 4 * (parameters + 2 * 640 + 2));
        // The units cover the parameters once.
        let units: u64 =
            ["root"].iter().chain(BLOCKS.iter()).map(|u| unit_gathered_numel(&model, u, 2)).sum();
        assert_eq!(units, parameters);
    }

    #[test]
    fn ddp_holds_everything_fsdp_a_share() {
        let model = lab_model();
        let ddp = ddp_rank_bytes(&model);
        assert_eq!(ddp.parameters, 4 * 17_117_466);
        assert_eq!((ddp.gradients, ddp.buckets, ddp.optimizer), (ddp.parameters, ddp.parameters, 0));
        // BatchNorm: a mean and a variance per channel of each of the 13 norms.
        let channels: u64 = 16 + 4 * 160 + 4 * 320 + 4 * 640;
        assert_eq!(ddp.buffers, 4 * 2 * channels);
        let fsdp2 = fsdp_rank_bytes(&model, 2, 0);
        assert_eq!(fsdp2.parameters, ddp.parameters / 2);
        assert_eq!(fsdp2.buckets, 0);
    }

    /// What the model-parallelism page says about where to cut the model.
    #[test]
    fn blocks_cost_similar_compute_but_the_last_two_hold_most_parameters() {
        let model = lab_model();
        let parameters: u64 = model.iter().filter(|v| v.trainable).map(Variable::numel).sum();
        let last_two = unit_gathered_numel(&model, "block5", 1) + unit_gathered_numel(&model, "block6", 1);
        assert!(4 * last_two > 3 * parameters, "blocks 5 and 6 hold {last_two} of {parameters}");
        let macs: Vec<u64> = BLOCKS
            .iter()
            .map(|b| {
                model
                    .iter()
                    .filter(|v| v.unit() == *b && v.shape.len() == 4)
                    .map(|v| v.numel() * crate::pixels_of(&v.name).unwrap())
                    .sum()
            })
            .collect();
        let (least, most) = (macs.iter().min().unwrap(), macs.iter().max().unwrap());
        assert!(most < &(2 * least), "the blocks' multiply-adds {macs:?}");
    }

    #[test]
    fn the_step_gathers_each_block_twice_and_ends_where_it_began() {
        let model = lab_model();
        let (events, shards) = fsdp_step(&model, 2);
        for block in BLOCKS {
            let ops: Vec<&str> = events.iter().filter(|e| e.unit == block).map(|e| e.op).collect();
            assert_eq!(ops, ["AG", "F", "AG", "B", "RS"], "{block}");
        }
        assert_eq!(events.last().unwrap().held, shards, "everything resharded after the step");
        // The peak: the shards, the root and the largest block (block6) gathered.
        let peak = events.iter().map(|e| e.held).max().unwrap();
        let full = |u: &str| 4 * unit_gathered_numel(&model, u, 2);
        assert_eq!(peak, shards + full("root") + full("block6"));
        assert!(peak < ddp_rank_bytes(&model).parameters);
    }
}
