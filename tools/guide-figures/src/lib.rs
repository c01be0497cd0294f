//! The lab guide's figures that show what the library does, drawn from the library
//! itself so that they cannot drift from it:
//!
//! - `sampler.svg`: the indices `tch_distributed::DistributedSampler` gives each rank,
//!   with its padding, in two epochs (`set_epoch`);
//! - `ddp-buckets.svg`: the gradient buckets `tch_distributed`'s DDP (libtorch's
//!   Reducer) makes of the lab's WideResNet, and how their all-reduces overlap the
//!   backward pass;
//! - `timeline-step-08.svg`: a real 2-rank run of step 8 as its timeline
//!   (`DDP_LAB_TIMELINE`) recorded it, from the trace in `timelines/` (see
//!   [`timeline_figure`]): the bucket all-reduces overlapping backward, a rank waiting at the
//!   barrier;
//! - `timeline-step-14-fsdp.svg`: one training step of a real 2-rank `--fsdp` run of
//!   step 14, from the trace in `timelines/` (see [`timeline_fsdp`]): the all-gathers
//!   before each block's forward and backward, the reduce-scatters of its gradients;
//! - `timeline-hand-ddp.svg`: one step of each mode of the `hand_ddp` benchmark (DDP
//!   written by hand, with and without buckets, against the library's and PyTorch's),
//!   from the timeline in `timelines/` (see [`timeline_overlap`]): which all-reduce ran
//!   while backward was still computing;
//! - `pipeline-schedule.svg`: GPipe's schedule of 4 stages with and without
//!   micro-batches, and its bubble (see [`pipeline`]);
//! - `fsdp-bytes.svg` and `fsdp-unshard.svg`: the lab's WideResNet sharded as PyTorch's
//!   FSDP2 shards it, bytes per rank beside DDP's, and the unshard/reshard around each
//!   block in one step (see [`fsdp`]).
//!
//! `cargo run -p guide-figures` redraws them into `lab-guide/src/figures/`; the test
//! `tests/up_to_date.rs` fails when a committed figure differs from what this draws now.
//! The guide's other figures are hand-written SVG in the same directory.
pub mod fsdp;
pub mod pipeline;
pub mod timeline_figure;
pub mod timeline_fsdp;
pub mod timeline_overlap;

use std::path::{Path, PathBuf};
use std::time::Duration;

use guide_svg::{Svg, INK, MUTED, RANK_FILL, RANK_STROKE};
use tch::nn;
use tch_distributed as dist;

/// The directory of the guide's figures.
pub fn figures_dir() -> PathBuf {
    let tools = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tools/");
    tools.parent().expect("the repository").join("lab-guide/src/figures")
}

/// Every generated figure: its file name in [`figures_dir`] and its text. Starts (and
/// ends) a one-rank Gloo process group on the loopback, which DDP needs; call it once
/// per process.
pub fn generated() -> Result<Vec<(&'static str, String)>, String> {
    let layout = bucket_layout()?;
    let model = fsdp::lab_model();
    let trace = read_recorded(&timeline_figure::recorded_path())?;
    let fsdp_trace = read_recorded(&timeline_fsdp::recorded_path())?;
    let hand_ddp_trace = read_recorded(&timeline_overlap::recorded_path())?;
    Ok(vec![
        ("sampler.svg", sampler_figure()),
        ("ddp-buckets.svg", buckets_figure(&layout)),
        ("timeline-step-08.svg", timeline_figure::timeline_figure(&trace)?),
        ("timeline-step-14-fsdp.svg", timeline_fsdp::fsdp_timeline_figure(&fsdp_trace, &model)?),
        ("timeline-hand-ddp.svg", timeline_overlap::overlap_figure(&hand_ddp_trace)?),
        ("pipeline-schedule.svg", pipeline::schedule_figure()),
        ("fsdp-bytes.svg", fsdp::bytes_figure(&model)),
        ("fsdp-unshard.svg", fsdp::unshard_figure(&model)),
    ])
}

/// A recorded timeline (a merged Chrome trace) committed in `timelines/`.
fn read_recorded(path: &Path) -> Result<serde_json::Value, String> {
    std::fs::read_to_string(path)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
        .map_err(|e| format!("cannot read the recorded timeline {}: {e}", path.display()))
}

// --- the sampler ----------------------------------------------------------------------

/// The figure's example: the concepts page's 10 images over 4 ranks, so 2 of padding.
const SAMPLER_LEN: usize = 10;
const SAMPLER_RANKS: usize = 4;

/// One epoch of the example as the library splits it.
struct SamplerEpoch {
    epoch: u64,
    /// Each rank's indices, as `indices()` returns them.
    per_rank: Vec<Vec<usize>>,
    /// The padded global order they are dealt from: position `p` went to rank `p % R`.
    order: Vec<usize>,
}

fn sampler_epoch(epoch: u64) -> SamplerEpoch {
    let per_rank: Vec<Vec<usize>> = (0..SAMPLER_RANKS)
        .map(|rank| {
            let mut sampler = dist::DistributedSampler::with_defaults(SAMPLER_LEN, SAMPLER_RANKS, rank)
                .expect("a valid rank of the example");
            sampler.set_epoch(epoch);
            sampler.indices()
        })
        .collect();
    let total = per_rank[0].len() * SAMPLER_RANKS;
    let order: Vec<usize> = (0..total).map(|p| per_rank[p % SAMPLER_RANKS][p / SAMPLER_RANKS]).collect();
    // What the figure says about the library; should it ever stop being true, the
    // figure must be redrawn by hand, not silently regenerated.
    let mut head = order[..SAMPLER_LEN].to_vec();
    head.sort_unstable();
    assert_eq!(head, (0..SAMPLER_LEN).collect::<Vec<_>>(), "the first N positions are a permutation");
    assert!(
        (SAMPLER_LEN..total).all(|p| order[p] == order[p - SAMPLER_LEN]),
        "the padding repeats the order's start"
    );
    SamplerEpoch { epoch, per_rank, order }
}

/// The sampler's split of 10 images over 4 ranks in epochs 0 and 1.
pub fn sampler_figure() -> String {
    let epochs = [sampler_epoch(0), sampler_epoch(1)];
    assert_ne!(epochs[0].order, epochs[1].order, "set_epoch changes the order");
    let (width, height) = (760.0, 450.0);
    let mut svg = Svg::new(
        width,
        height,
        "DistributedSampler: 10 images over 4 ranks, padded to 12, in epochs 0 and 1",
    );
    svg.text(
        20.0,
        32.0,
        "title",
        "",
        &format!(
            "DistributedSampler: {SAMPLER_LEN} images, {SAMPLER_RANKS} ranks, PyTorch's defaults (shuffle, seed 0)"
        ),
    );
    svg.text(20.0, 52.0, "small", "", "drawn from tch_distributed::DistributedSampler (tools/guide-figures)");
    let cell = |svg: &mut Svg, x: f64, y: f64, w: f64, rank: usize, value: usize, padding: bool| {
        let dash = if padding { " stroke-dasharray=\"4 3\"" } else { "" };
        svg.rect(
            x,
            y,
            w,
            32.0,
            &format!(
                "fill=\"{}\" stroke=\"{}\" stroke-width=\"1.5\" rx=\"3\"{dash}",
                RANK_FILL[rank], RANK_STROKE[rank]
            ),
        );
        svg.text(x + w / 2.0, y + 21.0, "cell", "", &value.to_string());
    };
    for (i, e) in epochs.iter().enumerate() {
        let y0 = 66.0 + 160.0 * i as f64;
        svg.text(
            20.0,
            y0 + 18.0,
            "head",
            "",
            &format!(
                "Epoch {0}: set_epoch({0}); all ranks draw one permutation, seeded with seed + epoch = {0}",
                e.epoch
            ),
        );
        // The padded order, dealt out like cards.
        let (x0, step, y) = (150.0, 46.0, y0 + 32.0);
        svg.text(20.0, y + 21.0, "body", "", "padded order");
        for (p, &value) in e.order.iter().enumerate() {
            let x = x0 + step * p as f64;
            cell(&mut svg, x, y, 40.0, p % SAMPLER_RANKS, value, p >= SAMPLER_LEN);
            svg.text(
                x + 20.0,
                y + 46.0,
                "small",
                "text-anchor=\"middle\"",
                &format!("r{}", p % SAMPLER_RANKS),
            );
        }
        let pad_start = x0 + step * SAMPLER_LEN as f64;
        let pad_end = x0 + step * (e.order.len() - 1) as f64 + 40.0;
        svg.line(pad_start, y + 54.0, pad_end, y + 54.0, &format!("stroke=\"{MUTED}\""));
        svg.text(
            pad_end,
            y + 68.0,
            "small",
            "text-anchor=\"end\"",
            &format!(
                "padding: the first {} of the order again, so that {} = {} × {SAMPLER_RANKS}",
                e.order.len() - SAMPLER_LEN,
                e.order.len(),
                e.per_rank[0].len()
            ),
        );
        // Each rank's share.
        let y = y0 + 112.0;
        for (rank, indices) in e.per_rank.iter().enumerate() {
            let x = 20.0 + 185.0 * rank as f64;
            svg.text(x, y + 21.0, "body", "", &format!("rank {rank}"));
            for (j, &value) in indices.iter().enumerate() {
                let padding = rank + SAMPLER_RANKS * j >= SAMPLER_LEN;
                cell(&mut svg, x + 56.0 + 38.0 * j as f64, y, 34.0, rank, value, padding);
            }
        }
    }
    svg.text(
        20.0,
        height - 44.0,
        "body",
        "",
        "Rank r takes positions r, r + 4, r + 8: the shares are disjoint apart from the padding (dashed),",
    );
    svg.text(
        20.0,
        height - 24.0,
        "body",
        "",
        "and together cover all 10 images. Without set_epoch, every epoch would repeat epoch 0's order.",
    );
    svg.finish()
}

// --- DDP's buckets ----------------------------------------------------------------------

/// One gradient bucket of the lab's WideResNet.
#[derive(Debug, Clone, PartialEq)]
pub struct Bucket {
    /// Parameter tensors in it.
    pub tensors: usize,
    /// Bytes of gradient it all-reduces.
    pub bytes: u64,
    /// Forward multiply-adds per image of the layers whose gradients it holds: the
    /// backward pass spends its time in proportion.
    pub macs: u64,
    /// Its parameter whose gradient backward produces first, and the one it produces
    /// last.
    pub first: String,
    pub last: String,
}

/// How DDP buckets the lab's WideResNet, in the order the buckets are all-reduced.
#[derive(Debug, Clone, PartialEq)]
pub struct BucketLayout {
    /// From the second iteration on.
    pub buckets: Vec<Bucket>,
    /// Tensors per bucket in the first iteration, before DDP regroups them.
    pub first_iteration: Vec<usize>,
    /// `DdpOptions::default()`'s bucket cap, in MiB.
    pub cap_mib: f64,
    /// The model's parameters (scalars, fp32).
    pub parameters: u64,
}

/// A parameter tensor of the model.
struct Param {
    name: String,
    bytes: u64,
    macs: u64,
}

/// The buckets `tch_distributed`'s DDP makes of the lab's full-width WideResNet on one
/// CPU rank (a one-rank Gloo group on the loopback): those of `new`, in creation order,
/// and those it regroups them into after the first iteration, in the order backward
/// produced the gradients, which the figure shows.
pub fn bucket_layout() -> Result<BucketLayout, String> {
    let port = child_process::free_port().map_err(|e| format!("no free port for the one-rank group: {e}"))?;
    let init = dist::Init::Tcp { host: "127.0.0.1".to_string(), port };
    dist::init_process_group(
        dist::Backend::Gloo,
        dist::InitOptions {
            init_method: init,
            world_size: Some(1),
            rank: Some(0),
            timeout: Duration::from_secs(60),
        },
    )
    .map_err(|e| format!("cannot start a one-rank Gloo group: {e}"))?;
    let widths = labkit::Widths::LAB;
    let vs = nn::VarStore::new(tch::Device::Cpu);
    let model = labkit::WideResNet::new(&vs.root(), widths, labkit::Norm::BatchNorm);
    let opts = dist::DdpOptions::default();
    let ddp = dist::DistributedDataParallel::new(model, &vs, opts.clone()).map_err(|e| e.to_string())?;
    let first_iteration = ddp.buckets().map_err(|e| e.to_string())?.iter().map(Vec::len).collect();
    // Two iterations on one blank image: the first records the order the gradients
    // arrive in, the second's forward pass regroups the buckets by it.
    let image = tch::Tensor::zeros([1, 1, 28, 28], (tch::Kind::Float, tch::Device::Cpu));
    for _ in 0..2 {
        ddp.try_forward_t(&image, true).map_err(|e| e.to_string())?.sum(tch::Kind::Float).backward();
    }
    let regrouped = ddp.buckets().map_err(|e| e.to_string())?;
    let params = ddp
        .parameters()
        .iter()
        .map(|(name, t)| {
            let numel = t.numel() as u64;
            let macs = match t.size().len() {
                4 => numel * pixels_of(name)?, // a convolution: its weight at every output pixel
                2 => numel,                    // the classifier
                _ => 0,                        // biases and BatchNorm: left out, as perf.rs does
            };
            Ok(Param { name: name.clone(), bytes: numel * t.kind().elt_size_in_bytes() as u64, macs })
        })
        .collect::<Result<Vec<Param>, String>>()?;
    drop(ddp);
    dist::destroy_process_group().map_err(|e| e.to_string())?;

    let flops = 2 * params.iter().map(|p| p.macs).sum::<u64>();
    if flops != labkit::forward_flops_per_image(widths) {
        return Err(format!(
            "the layers' multiply-adds give {flops} FLOPs per image, labkit::forward_flops_per_image {}: \
             the model changed; update pixels_of in tools/guide-figures/src/lib.rs",
            labkit::forward_flops_per_image(widths)
        ));
    }
    let buckets = regrouped
        .iter()
        .map(|indices| {
            let run: Vec<&Param> = indices.iter().map(|&i| &params[i]).collect();
            Bucket {
                tensors: run.len(),
                bytes: run.iter().map(|p| p.bytes).sum(),
                macs: run.iter().map(|p| p.macs).sum(),
                first: run.first().map(|p| p.name.clone()).unwrap_or_default(),
                last: run.last().map(|p| p.name.clone()).unwrap_or_default(),
            }
        })
        .collect();
    Ok(BucketLayout {
        buckets,
        first_iteration,
        cap_mib: opts.bucket_cap_mb,
        parameters: params.iter().map(|p| p.bytes / 4).sum(),
    })
}

/// Output pixels of the convolution `name` of the WideResNet: the stem and blocks 1-2
/// work at 28×28, blocks 3-4 at 14×14 and blocks 5-6 at 7×7 (after each max-pool).
fn pixels_of(name: &str) -> Result<u64, String> {
    let module = name.split('.').next().unwrap_or_default();
    let block: Option<u64> = module.strip_prefix("block").and_then(|n| n.parse().ok());
    match (module, block) {
        ("stem", _) | (_, Some(1 | 2)) => Ok(28 * 28),
        (_, Some(3 | 4)) => Ok(14 * 14),
        (_, Some(5 | 6)) => Ok(7 * 7),
        _ => Err(format!("no resolution known for the convolution {name}; update pixels_of")),
    }
}

/// A size in MiB with one decimal, or in KiB below 1 MiB.
pub(crate) fn size(bytes: u64) -> String {
    if bytes < 1024 * 1024 {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    } else {
        format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
    }
}

/// The buckets, and a schematic timeline of backward and the all-reduces.
pub fn buckets_figure(layout: &BucketLayout) -> String {
    let total_bytes: u64 = layout.buckets.iter().map(|b| b.bytes).sum();
    let total_macs: u64 = layout.buckets.iter().map(|b| b.macs).sum();
    let tensors: usize = layout.buckets.iter().map(|b| b.tensors).sum();
    let n = layout.buckets.len();
    let (width, x0, right) = (760.0, 150.0, 690.0);
    let height = 385.0 + 20.0 * n as f64;
    let mut svg =
        Svg::new(width, height, "DDP's gradient buckets of the lab's WideResNet overlap the backward pass");
    svg.text(20.0, 32.0, "title", "", "DDP all-reduces gradients in buckets while backward still runs");
    let lines = [
        format!(
            "The lab's WideResNet: {} parameters in {tensors} tensors, {} of fp32 gradients. DDP groups them",
            group_thousands(layout.parameters),
            size(total_bytes)
        ),
        format!(
            "in {n} buckets, each closed once it holds {} MiB, as tch_distributed's DDP does from the second iteration on",
            layout.cap_mib
        ),
        "(drawn from it by tools/guide-figures).".to_string(),
    ];
    for (i, line) in lines.iter().enumerate() {
        svg.text(20.0, 52.0 + 15.0 * i as f64, "small", "", line);
    }
    // Schematic timing: backward spends its time on a bucket in proportion to its
    // layers' multiply-adds, the all-reduce in proportion to its bytes; all-reducing
    // every gradient is taken to cost COMM of the backward pass.
    const COMM: f64 = 0.6;
    let span = (right - x0) / (1.0 + COMM);
    let compute_w = |b: &Bucket| span * b.macs as f64 / total_macs as f64;
    let comm_w = |b: &Bucket| span * COMM * b.bytes as f64 / total_bytes as f64;
    let colors = |k: usize| (RANK_FILL[k % 4], RANK_STROKE[k % 4]);
    let bar = |svg: &mut Svg, x: f64, y: f64, w: f64, k: usize, label: &str| {
        let (fill, stroke) = colors(k);
        svg.rect(x, y, w, 32.0, &format!("fill=\"{fill}\" stroke=\"{stroke}\" stroke-width=\"1.5\""));
        // The label, or just the bucket's number where it does not fit.
        let label = if w > 8.5 * label.len() as f64 { label.to_string() } else { k.to_string() };
        if w > 12.0 {
            svg.text(x + w / 2.0, y + 21.0, "cell", "", &label);
        }
    };
    let (y_back, y_comm, y_flat) = (119.0, 163.0, 241.0);
    svg.text(20.0, y_back + 21.0, "body", "", "backward");
    svg.text(20.0, y_comm + 21.0, "body", "", "all-reduce");
    svg.text(
        x0,
        y_back - 8.0,
        "small",
        "",
        "gradients arrive from the output layer (fc) back to the input (stem) →",
    );
    let (mut x, mut comm_free) = (x0, x0);
    for (k, b) in layout.buckets.iter().enumerate() {
        let w = compute_w(b);
        bar(&mut svg, x, y_back, w, k, &format!("bucket {k}"));
        x += w;
        // A bucket's all-reduce starts once its last gradient is in and the previous
        // bucket's all-reduce is done: buckets are reduced in order.
        let start = x.max(comm_free);
        let cw = comm_w(b);
        bar(&mut svg, start, y_comm, cw, k, &k.to_string());
        comm_free = start + cw;
    }
    let backward_end = x;
    svg.line(
        backward_end,
        y_back - 4.0,
        backward_end,
        y_comm + 52.0,
        &format!("stroke=\"{INK}\" stroke-dasharray=\"3 3\""),
    );
    svg.text(backward_end - 4.0, y_comm + 50.0, "small", "text-anchor=\"end\"", "backward ends");
    svg.text(comm_free + 4.0, y_comm + 21.0, "small", "", "step");
    // For comparison: one all-reduce of everything once backward is over.
    svg.text(20.0, y_flat + 21.0, "body", "", "one all-reduce");
    svg.text(20.0, y_flat + 36.0, "small", "", "after backward");
    svg.rect(x0, y_flat, backward_end - x0, 32.0, "fill=\"#eeeeee\" stroke=\"#999999\" stroke-width=\"1.5\"");
    svg.text((x0 + backward_end) / 2.0, y_flat + 21.0, "cell", "", "backward");
    let flat_w = span * COMM;
    svg.rect(backward_end, y_flat, flat_w, 32.0, "fill=\"#dddddd\" stroke=\"#777777\" stroke-width=\"1.5\"");
    svg.text(backward_end + flat_w / 2.0, y_flat + 21.0, "cell", "", "all-reduce");
    svg.text(backward_end + flat_w + 4.0, y_flat + 21.0, "small", "", "step");
    svg.text(
        20.0,
        y_flat + 64.0,
        "small",
        "",
        "Schematic timing: backward bars in proportion to each bucket's multiply-adds, all-reduce bars to its bytes;",
    );
    svg.text(
        20.0,
        y_flat + 79.0,
        "small",
        "",
        &format!(
            "their ratio depends on the GPUs and the network. The first iteration still groups by creation order ({} tensors).",
            layout.first_iteration.iter().map(usize::to_string).collect::<Vec<_>>().join(", ")
        ),
    );
    // The buckets themselves.
    let mut y = y_flat + 110.0;
    for (k, b) in layout.buckets.iter().enumerate() {
        let (fill, stroke) = colors(k);
        svg.rect(20.0, y - 11.0, 12.0, 12.0, &format!("fill=\"{fill}\" stroke=\"{stroke}\""));
        svg.text(
            40.0,
            y,
            "body",
            "",
            &format!(
                "bucket {k}: {}, {} tensors, {:.0}% of the work: {} back to {}",
                size(b.bytes),
                b.tensors,
                100.0 * b.macs as f64 / total_macs as f64,
                b.first,
                b.last
            ),
        );
        y += 20.0;
    }
    svg.finish()
}

/// 17117466 -> "17,117,466".
pub(crate) fn group_thousands(n: u64) -> String {
    let digits = n.to_string();
    // A comma before every digit with a multiple of three digits after it.
    let head = digits.len() % 3;
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && i % 3 == head {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stages_resolutions() {
        assert_eq!(pixels_of("stem.conv.weight"), Ok(784));
        assert_eq!(pixels_of("block2.cbr1.conv.weight"), Ok(784));
        assert_eq!(pixels_of("block3.shortcut.weight"), Ok(196));
        assert_eq!(pixels_of("block6.cbr2.conv.weight"), Ok(49));
        assert!(pixels_of("block7.cbr1.conv.weight").is_err());
    }

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(group_thousands(17_117_466), "17,117,466");
        assert_eq!(group_thousands(999), "999");
        assert_eq!(group_thousands(1_000), "1,000");
    }
}
