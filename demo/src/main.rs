//! The instructor's scaling demo: the finished lab (solutions/step_11) on 1, 2, 4 …
//! ranks, one GPU each (or CPU processes where there is no GPU), then a table, a chart
//! (SVG and PNG) and a JSON file; `--predict` says what a bigger node should do.
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use lab_program::{
    finished_lab_binary, run_lab, steady_images_per_sec, workspace_root, write_atomically,
    write_through_temp, Failure, LabRun, LabSettings,
};
use labkit::{DeviceChoice, GpuRequest, Placement};
use serde_json::json;

mod chart;
mod predict;

const ABOUT: &str = "The scaling demo: runs the finished lab on 1, 2, 4 … ranks and shows images/sec, speed-up and efficiency";
const LONG_ABOUT: &str = "\
The scaling demo: runs the finished lab (solutions/step_11) on 1, 2, 4 … ranks of this node, \
one GPU per rank, or CPU processes (Gloo) where there is no GPU, and shows what data \
parallelism buys.

Each world size trains --epochs epochs; the first is dropped (warm-up) and the others' \
images/sec are averaged. Speed-up = images/sec ÷ images/sec at 1 rank; efficiency = \
speed-up ÷ ranks. It prints a table and writes scaling.json, scaling.svg and scaling.png \
into --out-dir.

--predict instead estimates the DDP efficiency of a node with --gpus devices linked at \
--link-gbps: from the single-device step time (measured here by a 1-rank run, or \
--step-ms) and the gradient all-reduce per step (DDP's buckets: 1 MiB, then 25 MiB; ring \
all-reduce 2(N-1)/N × bytes ÷ bandwidth; communication assumed hidden behind backward, \
2/3 of the step, except the last bucket).

Examples:
  cargo run -p ddp-demo --release --bin demo
  cargo run -p ddp-demo --release --bin demo -- --world-sizes 1,2 --train-subset 2000
  cargo run -p ddp-demo --release --bin demo -- --predict --gpus 8 --link-gbps 300 --step-ms 120";

#[derive(Parser, Debug)]
#[command(about = ABOUT, long_about = LONG_ABOUT)]
struct Args {
    /// World sizes to run, comma-separated, starting with 1 [default: 1, 2, 4 … up to
    /// the GPUs of this node, or its CPUs].
    #[arg(long, value_delimiter = ',', value_name = "N,N,…")]
    world_sizes: Vec<usize>,
    /// `auto` (a GPU per rank when the node has one for the largest world size, else
    /// the CPU: the lab's rule), `cpu` or `cuda` (`gpu` too).
    #[arg(long, default_value = "auto", value_name = "DEVICE", ignore_case = true)]
    device: DeviceChoice,
    /// WideResNet widths [default: lab on GPUs and with --predict, narrow on CPUs].
    #[arg(long)]
    width: Option<String>,
    /// Images per batch on each rank [default: 512 on GPUs, as the lab's measurements; 32 on CPUs].
    #[arg(long)]
    batch_size: Option<usize>,
    /// Epochs per world size; the first is dropped (at least 2).
    #[arg(long, default_value_t = 3)]
    epochs: usize,
    /// Training images (the first N) [default: all on GPUs, 4000 on CPUs].
    #[arg(long)]
    train_subset: Option<usize>,
    /// Validation images (the first N) [default: all on GPUs, 1000 on CPUs].
    #[arg(long)]
    test_subset: Option<usize>,
    /// Torch threads per CPU rank [default: CPUs ÷ the largest world size, at least 1].
    #[arg(long)]
    threads: Option<usize>,
    /// `generated` (offline stand-in), `real` or `auto`, as the lab's --dataset.
    #[arg(long, default_value = "auto")]
    dataset: String,
    /// Data directory [default: <workspace>/data].
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Where scaling.json, scaling.svg and scaling.png go.
    #[arg(long, default_value = "demo-out")]
    out_dir: PathBuf,
    /// TTF font for the PNG's text [default: DejaVu Sans, embedded in the demo].
    #[arg(long)]
    font: Option<PathBuf>,
    /// Redraw scaling.svg and scaling.png into --out-dir from a scaling.json this demo
    /// wrote (one copied off a GPU node, say), without training.
    #[arg(long, value_name = "FILE", conflicts_with = "predict")]
    chart_from: Option<PathBuf>,
    /// Extra options for the lab, e.g. --lab-args=--amp,bf16.
    #[arg(long, value_delimiter = ',', allow_hyphen_values = true)]
    lab_args: Vec<String>,
    /// Seconds one world size may take before it is stopped.
    #[arg(long, default_value_t = 1800)]
    timeout: u64,
    /// Estimate the efficiency of a --gpus node instead of measuring scaling here.
    #[arg(long)]
    predict: bool,
    /// With --predict: devices of the node.
    #[arg(long)]
    gpus: Option<usize>,
    /// With --predict: per-device all-reduce bandwidth, GB/s (10^9 bytes/s; what
    /// nccl-tests calls bus bandwidth).
    #[arg(long)]
    link_gbps: Option<f64>,
    /// With --predict: the single-device training step in ms [default: measured by a
    /// 1-rank run with these settings].
    #[arg(long)]
    step_ms: Option<f64>,
    /// With --predict: model parameters [default: those of --width; 17,117,466 at lab width].
    #[arg(long)]
    params: Option<u64>,
}

/// One world size's result.
#[derive(Debug, Clone)]
pub struct Row {
    pub world_size: usize,
    pub images_per_sec: f64,
    pub speedup: f64,
    pub efficiency: f64,
    pub epoch_images_per_sec: Vec<f64>,
}

/// What the demo runs, resolved from the options and this node.
struct Plan {
    cuda: bool,
    world_sizes: Vec<usize>,
    settings: LabSettings,
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn powers_up_to(n: usize) -> Vec<usize> {
    let mut v: Vec<usize> =
        std::iter::successors(Some(1usize), |x| Some(x * 2)).take_while(|&x| x <= n).collect();
    if v.last() != Some(&n) && n > 0 {
        v.push(n);
    }
    v
}

/// What the demo runs on a node with `gpus` GPUs. Where the ranks compute is the lab's
/// placement rule ([`labkit::Placement::of_node`]) for the largest world size, so that
/// the demo asks for what the lab program will do: a GPU per rank, or the CPU.
fn plan(a: &Args, gpus: usize) -> Result<Plan, String> {
    let world_sizes = if a.world_sizes.is_empty() {
        powers_up_to(if a.device != DeviceChoice::Cpu && gpus > 0 { gpus } else { cpus() })
    } else {
        a.world_sizes.clone()
    };
    if world_sizes.first() != Some(&1) || world_sizes.windows(2).any(|w| w[0] >= w[1]) {
        return Err(format!(
            "--world-sizes {world_sizes:?}: give increasing world sizes starting with 1 (the baseline), e.g. 1,2,4"
        ));
    }
    let largest = *world_sizes.last().unwrap_or(&1);
    // Every world size on the same devices, or the speed-ups compare GPUs with CPUs; the
    // demo does not share GPUs between ranks (that measures the sharing, not DDP).
    let request = GpuRequest { device: a.device, share_gpus: false, ranks: largest };
    let placement = Placement::of_node(request, gpus).map_err(|e| {
        if gpus == 0 {
            e // --device cuda on a node without GPUs: the rule's message names the demo's options
        } else {
            format!("--world-sizes: {largest} ranks on --device cuda need {largest} GPUs, this node has {gpus}: give world sizes up to {gpus} (e.g. 1,2), or --device cpu")
        }
    })?;
    if placement == Placement::Cpu && a.device == DeviceChoice::Auto && gpus > 0 {
        eprintln!(
            "demo: {largest} ranks and {gpus} GPU(s): --device auto runs every world size on the CPU (the lab's rule: a GPU for every rank, or none); ask for at most --world-sizes …,{gpus} to measure the GPUs"
        );
    }
    let cuda = placement != Placement::Cpu;
    if largest > 256 {
        return Err(format!("--world-sizes: {largest} ranks is more than this demo starts (256)"));
    }
    if a.epochs < 2 {
        return Err("--epochs must be at least 2: the first epoch is dropped".into());
    }
    // --predict is about GPU nodes: the lab's model unless --width says otherwise.
    let width = a.width.clone().unwrap_or_else(|| if cuda || a.predict { "lab" } else { "narrow" }.into());
    width.parse::<labkit::Widths>()?;
    let batch_size = a.batch_size.unwrap_or(if cuda { 512 } else { 32 });
    if batch_size == 0 || a.threads == Some(0) {
        return Err("--batch-size and --threads must be at least 1".into());
    }
    let train_subset = a.train_subset.or((!cuda).then_some(4000));
    let test_subset = a.test_subset.or((!cuda).then_some(1000));
    if let Some(n) = train_subset {
        if n < largest * batch_size {
            return Err(format!(
                "--train-subset {n} leaves a rank of {largest} less than one batch of {batch_size}"
            ));
        }
    }
    if test_subset == Some(0) {
        return Err("--test-subset must be at least 1".into());
    }
    a.dataset.parse::<labkit::DatasetKind>().map_err(|e| e.to_string())?;
    if !a.predict && (a.gpus.is_some() || a.link_gbps.is_some() || a.step_ms.is_some() || a.params.is_some())
    {
        return Err("--gpus, --link-gbps, --step-ms and --params go with --predict".into());
    }
    let threads = if cuda { a.threads } else { Some(a.threads.unwrap_or((cpus() / largest).max(1))) };
    let settings = LabSettings {
        width,
        batch_size,
        epochs: a.epochs,
        train_subset,
        test_subset,
        threads,
        device: if cuda { "cuda" } else { "cpu" }.into(),
        dataset: a.dataset.clone(),
        data_dir: a.data_dir.clone().unwrap_or_else(|| workspace_root().join("data")),
        extra: a.lab_args.clone(),
    };
    Ok(Plan { cuda, world_sizes, settings })
}

fn main() -> ExitCode {
    child_process::stop_children_on_signals();
    let args = Args::parse();
    if let Some(json) = &args.chart_from {
        return Failure::exit(redraw_charts(json, &args.out_dir, args.font.as_deref()));
    }
    let result = plan(&args, labkit::gpu_count()).map_err(Failure::BadInput).and_then(|mut p| {
        // Once, before any run: every run then reads the same copy, and the demo says
        // which data set it trains on (the real one when present or downloadable).
        if !args.predict || args.step_ms.is_none() {
            let ready = p.settings.prepare_data().map_err(|e| Failure::BadInput(e.to_string()))?;
            eprintln!("demo: {}", ready.summary());
        }
        if args.predict {
            run_predict(&args, &p)
        } else {
            run_demo(&args, &p)
        }
    });
    Failure::exit(result)
}

/// Progress: a bar on a terminal, plain lines otherwise (logs, CI, tests).
struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    fn new(runs: usize) -> Progress {
        if !std::io::stderr().is_terminal() {
            return Progress { bar: None };
        }
        let bar = ProgressBar::new(runs as u64);
        if let Ok(style) =
            ProgressStyle::with_template("{spinner} [{bar:25}] {pos}/{len} world sizes, {elapsed} — {msg}")
        {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.enable_steady_tick(Duration::from_millis(200));
        Progress { bar: Some(bar) }
    }

    fn start(&self, msg: String) {
        match &self.bar {
            Some(bar) => bar.set_message(msg),
            None => eprintln!("demo: {msg}"),
        }
    }

    fn done(&self, msg: String) {
        match &self.bar {
            Some(bar) => {
                bar.println(msg);
                bar.inc(1);
            }
            None => eprintln!("demo: {msg}"),
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

fn measure(plan: &Plan, world_sizes: &[usize], timeout: Duration) -> Result<Vec<Row>, Failure> {
    let lab = finished_lab_binary().map_err(Failure::BadInput)?;
    let progress = Progress::new(world_sizes.len());
    let mut measured: Vec<(usize, f64, Vec<f64>)> = Vec::new();
    for &ws in world_sizes {
        progress.start(format!("training on {ws} rank{} ({} epochs)", plural(ws), plan.settings.epochs));
        let run = LabRun { world_size: ws, timeout, ..Default::default() };
        let out = run_lab(&lab, &plan.settings, run).map_err(|e| {
            progress.finish();
            Failure::Run(e)
        })?;
        let ips = steady_images_per_sec(&out.epochs).unwrap_or(f64::NAN);
        progress.done(format!("{ws} rank{}: {ips:.1} images/sec", plural(ws)));
        measured.push((ws, ips, out.epochs.iter().map(|e| e.images_per_sec).collect()));
    }
    progress.finish();
    Ok(rows_from(&measured))
}

/// Speed-up and efficiency against the 1-rank figure.
fn rows_from(measured: &[(usize, f64, Vec<f64>)]) -> Vec<Row> {
    let base = measured.iter().find(|m| m.0 == 1).map_or(f64::NAN, |m| m.1);
    measured
        .iter()
        .map(|(ws, ips, epochs)| Row {
            world_size: *ws,
            images_per_sec: *ips,
            speedup: ips / base,
            efficiency: ips / base / *ws as f64,
            epoch_images_per_sec: epochs.clone(),
        })
        .collect()
}

fn describe(plan: &Plan) -> String {
    let s = &plan.settings;
    let subset = |n: Option<usize>| n.map_or("all".to_string(), |n| n.to_string());
    let device = if plan.cuda {
        format!("{} (one GPU per rank, NCCL)", tch::Cuda::device_count())
    } else {
        format!("CPU processes, {} thread(s) each, Gloo; {} CPUs", s.threads.unwrap_or(1), cpus())
    };
    let data = if s.dataset == "generated" { "the generated stand-in" } else { "Fashion-MNIST" };
    format!(
        "device: {device}; {data}; width {}, batch {} per rank, {} training / {} validation images, {} epochs (first dropped)",
        s.width,
        s.batch_size,
        subset(s.train_subset),
        subset(s.test_subset),
        s.epochs
    )
}

fn run_demo(a: &Args, plan: &Plan) -> Result<(), Failure> {
    std::fs::create_dir_all(&a.out_dir)
        .map_err(|e| Failure::BadInput(format!("cannot create --out-dir {}: {e}", a.out_dir.display())))?;
    // Fail on a missing font before minutes of training, not after.
    chart::register_font(a.font.as_deref()).map_err(Failure::BadInput)?;
    let rows = measure(plan, &plan.world_sizes, Duration::from_secs(a.timeout.max(1)))?;
    let about = describe(plan);
    println!("Scaling of the finished lab — {about}");
    println!();
    print!("{}", table(&rows));
    let (svg, png) =
        write_charts(&a.out_dir, &rows, &chart_title(&plan.settings.device, &plan.settings.width))
            .map_err(Failure::Run)?;
    let json_path = a.out_dir.join("scaling.json");
    let json = json!({
        "demo": "scaling",
        "about": about,
        "device": plan.settings.device,
        "dataset": plan.settings.dataset,
        "data_dir": plan.settings.data_dir,
        "width": plan.settings.width,
        "batch_size": plan.settings.batch_size,
        "epochs": plan.settings.epochs,
        "train_subset": plan.settings.train_subset,
        "test_subset": plan.settings.test_subset,
        "threads_per_rank": plan.settings.threads,
        "statistic": "mean images/sec of the epochs after the first; speed-up and efficiency against 1 rank",
        "results": rows.iter().map(|r| json!({
            "world_size": r.world_size,
            "images_per_sec": r.images_per_sec,
            "speedup": r.speedup,
            "efficiency": r.efficiency,
            "epoch_images_per_sec": r.epoch_images_per_sec,
        })).collect::<Vec<_>>(),
    });
    let text = serde_json::to_string_pretty(&json).map_err(|e| Failure::Run(e.to_string()))? + "\n";
    write_atomically(&json_path, &text)
        .map_err(|e| Failure::Run(format!("writing {}: {e}", json_path.display())))?;
    println!();
    println!("wrote {}, {} and {}", json_path.display(), svg.display(), png.display());
    Ok(())
}

fn chart_title(device: &str, width: &str) -> String {
    let device = if device == "cuda" { "GPU" } else { "CPU" };
    format!("Finished lab, {device} width {width}: images/sec per world size")
}

/// scaling.svg and scaling.png in `dir`. Each goes to a temporary name and is renamed,
/// like the JSON: no half files.
fn write_charts(dir: &Path, rows: &[Row], title: &str) -> Result<(PathBuf, PathBuf), String> {
    let svg = dir.join("scaling.svg");
    let png = dir.join("scaling.png");
    write_via_temp(&svg, |tmp| chart::write_svg(tmp, rows, title))?;
    write_via_temp(&png, |tmp| chart::write_png(tmp, rows, title))?;
    Ok((svg, png))
}

/// `--chart-from`: the charts of a scaling.json written earlier (perhaps elsewhere).
fn redraw_charts(json_path: &Path, out_dir: &Path, font: Option<&Path>) -> Result<(), Failure> {
    let bad = |why: String| Failure::BadInput(format!("--chart-from {}: {why}", json_path.display()));
    let text = std::fs::read_to_string(json_path).map_err(|e| bad(e.to_string()))?;
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
    let results = json["results"]
        .as_array()
        .filter(|r| !r.is_empty())
        .ok_or_else(|| bad("no \"results\" list: give a scaling.json that this demo wrote".into()))?;
    let mut measured = Vec::new();
    for r in results {
        match (r["world_size"].as_u64(), r["images_per_sec"].as_f64()) {
            (Some(ws), Some(ips)) if ws >= 1 => measured.push((ws as usize, ips, Vec::new())),
            _ => return Err(bad(format!("a result without world_size and images_per_sec: {r}"))),
        }
    }
    chart::register_font(font).map_err(Failure::BadInput)?;
    std::fs::create_dir_all(out_dir)
        .map_err(|e| Failure::BadInput(format!("cannot create --out-dir {}: {e}", out_dir.display())))?;
    let title = chart_title(json["device"].as_str().unwrap_or("cpu"), json["width"].as_str().unwrap_or("?"));
    let (svg, png) = write_charts(out_dir, &rows_from(&measured), &title).map_err(Failure::Run)?;
    println!("wrote {} and {}", svg.display(), png.display());
    Ok(())
}

/// `write` (a chart library writing a file) through a temporary file: never half a chart.
fn write_via_temp(path: &Path, write: impl FnOnce(&Path) -> Result<(), String>) -> Result<(), String> {
    write_through_temp(path, |tmp| write(tmp).map_err(std::io::Error::other))
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn table(rows: &[Row]) -> String {
    let mut out = String::from("| ranks | images/sec | speed-up | efficiency |\n|---:|---:|---:|---:|\n");
    for r in rows {
        out.push_str(&format!(
            "| {} | {:.1} | {:.2}x | {:.1}% |\n",
            r.world_size,
            r.images_per_sec,
            r.speedup,
            r.efficiency * 100.0
        ));
    }
    out
}

fn run_predict(a: &Args, plan: &Plan) -> Result<(), Failure> {
    let devices =
        a.gpus.ok_or_else(|| Failure::BadInput("--predict needs --gpus N (devices of the node)".into()))?;
    let link = a.link_gbps.ok_or_else(|| {
        Failure::BadInput("--predict needs --link-gbps X (per-device all-reduce bandwidth in GB/s)".into())
    })?;
    if devices == 0 || devices > 1024 {
        return Err(Failure::BadInput(format!("--gpus must be between 1 and 1024, got {devices}")));
    }
    if !(link.is_finite() && link > 0.0) {
        return Err(Failure::BadInput(format!("--link-gbps must be a positive number, got {link}")));
    }
    let parameters = match a.params {
        Some(0) => return Err(Failure::BadInput("--params must be at least 1".into())),
        Some(p) => p,
        None => parameter_count(&plan.settings.width),
    };
    if a.step_ms.is_none()
        && !plan.cuda
        && plan.settings.width.parse::<labkit::Widths>().ok() == Some(labkit::Widths::LAB)
    {
        return Err(Failure::BadInput(format!(
            "--predict needs --step-ms on a node without a GPU: measuring the {} width here on the CPU would take hours and say little about a GPU; pass the step time of a GPU (14.3 ms for the lab width at batch 512 in bf16 on an H100, see README), or --width narrow to measure the narrow model here",
            plan.settings.width
        )));
    }
    let step_seconds = match a.step_ms {
        Some(ms) if ms.is_finite() && ms > 0.0 => ms / 1e3,
        Some(ms) => return Err(Failure::BadInput(format!("--step-ms must be a positive number, got {ms}"))),
        None => {
            let rows = measure(plan, &[1], Duration::from_secs(a.timeout.max(1)))?;
            let ips = rows[0].images_per_sec;
            println!("measured: {ips:.1} images/sec on 1 rank — {}", describe(plan));
            if !plan.cuda {
                println!("note: a CPU step time says little about a GPU node; pass --step-ms for a GPU's");
            }
            plan.settings.batch_size as f64 / ips
        }
    };
    println!(
        "node: {devices} devices at {link} GB/s each; model: {parameters} parameters ({:.1} MiB of float32 gradients)",
        parameters as f64 * 4.0 / predict::MIB as f64
    );
    println!("{}", predict::predict(devices, parameters, step_seconds, link));
    Ok(())
}

/// Parameters of the WideResNet at `width` (17,117,466 at the lab's).
fn parameter_count(width: &str) -> u64 {
    let widths: labkit::Widths = width.parse().unwrap_or(labkit::Widths::LAB);
    if widths == labkit::Widths::LAB {
        return predict::LAB_PARAMETERS;
    }
    let vs = tch::nn::VarStore::new(tch::Device::Cpu);
    let _ = labkit::WideResNet::new(&vs.root(), widths, labkit::Norm::BatchNorm);
    labkit::parameter_count(&vs) as u64
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_world_sizes_are_powers_of_two_and_the_total() {
        assert_eq!(powers_up_to(1), vec![1]);
        assert_eq!(powers_up_to(2), vec![1, 2]);
        assert_eq!(powers_up_to(8), vec![1, 2, 4, 8]);
        assert_eq!(powers_up_to(6), vec![1, 2, 4, 6]);
    }

    fn plan_of(args: &[&str], gpus: usize) -> Result<Plan, String> {
        let a = Args::try_parse_from(std::iter::once("demo").chain(args.iter().copied())).unwrap();
        plan(&a, gpus)
    }

    /// The demo places its ranks by the lab's rule, with the node's GPUs as a value (so
    /// that a CPU machine tests the GPU nodes' plans): a GPU per rank up to the GPUs
    /// there are, never GPUs for some world sizes and CPUs for others.
    #[test]
    fn the_demo_places_ranks_by_the_labs_rule() {
        let on_gpus = plan_of(&[], 4).unwrap();
        assert_eq!(on_gpus.world_sizes, vec![1, 2, 4]);
        assert!(on_gpus.cuda && on_gpus.settings.device == "cuda");
        let two = plan_of(&["--world-sizes", "1,2"], 2).unwrap();
        assert!(two.cuda, "two ranks, two GPUs: one each");
        // More ranks than GPUs under `auto`: the lab runs on the CPU, and so does every
        // world size of the demo.
        let more = plan_of(&["--world-sizes", "1,2,4"], 2).unwrap();
        assert!(!more.cuda && more.settings.device == "cpu");
        // ... and `cuda` says what to ask for instead.
        let e = plan_of(&["--device", "cuda", "--world-sizes", "1,2,4"], 2).err().unwrap();
        assert!(e.contains("4 ranks") && e.contains("up to 2"), "{e}");
        let e = plan_of(&["--device", "cuda"], 0).err().unwrap();
        assert!(e.contains("sees no GPU"), "{e}");
        assert!(!plan_of(&["--device", "cpu", "--world-sizes", "1,2"], 8).unwrap().cuda);
    }

    #[test]
    fn rows_relate_to_one_rank() {
        let rows = rows_from(&[(1, 100.0, vec![]), (2, 180.0, vec![]), (4, 320.0, vec![])]);
        assert_eq!(rows[0].speedup, 1.0);
        assert_eq!(rows[0].efficiency, 1.0);
        assert!((rows[1].speedup - 1.8).abs() < 1e-12 && (rows[1].efficiency - 0.9).abs() < 1e-12);
        assert!((rows[2].efficiency - 0.8).abs() < 1e-12);
        let t = table(&rows);
        assert!(t.contains("| 2 | 180.0 | 1.80x | 90.0% |"), "{t}");
    }
}
