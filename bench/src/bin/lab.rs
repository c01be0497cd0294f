//! The finished lab (solutions/step_11, Rust) against its PyTorch reference
//! (bench/python/lab_reference.py), whole programs on this machine, in one run.
//!
//!     cargo run -p ddp-bench --release --bin lab
//!
//! Both programs get the same options (narrow WideResNet, a training subset, one
//! thread per rank, CPU ranks over Gloo, the generated stand-in data set unless
//! `--dataset` says otherwise) and train a fixed number of epochs. A run's figure is
//! the mean images/sec its rank 0 printed over the epochs after the first. Every
//! repeat runs Rust and PyTorch at `--world-size` ranks and at 1 rank, alternating
//! which side goes first, and the table reports the medians over repeats:
//!
//! - images/sec at `--world-size` ranks, Rust ÷ PyTorch (target ≥ 1.15);
//! - DDP efficiency: per-rank images/sec at `--world-size` ranks ÷ images/sec at 1 rank,
//!   for each side (target ≥ 0.90, and Rust's not below PyTorch's);
//! - all_reduce bandwidth, Rust ÷ PyTorch, measured by the `allreduce` benchmark.
//!
//! Nothing here asserts on timings: the exit status is 0 whether targets are met or not.
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::Duration;

use clap::Parser;
use ddp_bench::common::{
    json_num, json_str, load_average, median, probe_python, workspace_root, write_atomically, Failure, Side,
};
use ddp_bench::labrun::{finished_lab_binary, run_lab, sibling_binary, steady_images_per_sec, LabSettings};

const RATIO_TARGET: f64 = 1.15;
const EFFICIENCY_TARGET: f64 = 0.90;
const ALLREDUCE_TARGET: f64 = 0.98;

#[derive(Parser, Debug)]
#[command(
    about = "The finished lab in Rust vs its PyTorch reference: images/sec, DDP efficiency, all_reduce bandwidth"
)]
struct Args {
    /// WideResNet widths, as the lab's --width (`narrow`, `lab` or four numbers).
    #[arg(long, default_value = "narrow")]
    width: String,
    /// Training images (the first N).
    #[arg(long, default_value_t = 4000)]
    train_subset: usize,
    /// Validation images (the first N).
    #[arg(long, default_value_t = 1000)]
    test_subset: usize,
    /// Epochs per run; the first is dropped from the throughput (at least 2).
    #[arg(long, default_value_t = 3)]
    epochs: usize,
    /// Images per batch on each rank.
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    /// Ranks of the distributed measurement (efficiency compares it with 1 rank).
    #[arg(long, default_value_t = 2)]
    world_size: usize,
    /// Torch threads per rank, both sides.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Runs per side and world size; the figures are medians over them.
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// all_reduce message size in MB for the bandwidth ratio; 0 skips it.
    #[arg(long, default_value_t = 16.0)]
    allreduce_mb: f64,
    /// `generated` (made here, offline), `real` or `auto`, as the lab's --dataset.
    #[arg(long, default_value = "generated")]
    dataset: String,
    /// Data directory [default: <workspace>/data].
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Python interpreter with torch [default: <workspace>/.venv/bin/python].
    #[arg(long)]
    python: Option<PathBuf>,
    /// Also write the results as JSON to this file (atomically).
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
    /// `cpu` (Gloo) or `cuda` (one GPU per rank, NCCL): the same for both sides.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Extra options for both programs, comma-separated, e.g. `--lab-args=--amp,bf16,--channels-last`.
    #[arg(long, value_delimiter = ',', allow_hyphen_values = true)]
    lab_args: Vec<String>,
    /// Seconds one run may take before it is killed.
    #[arg(long, default_value_t = 900)]
    timeout: u64,
}

fn validate(a: &Args) -> Result<(), String> {
    a.width.parse::<labkit::Widths>()?;
    a.dataset.parse::<labkit::DatasetKind>().map_err(|e| e.to_string())?;
    if a.epochs < 2 {
        return Err("--epochs must be at least 2: the first epoch is dropped from the throughput".into());
    }
    if a.world_size < 2 || a.world_size > 64 {
        return Err(format!("--world-size must be between 2 and 64, got {}", a.world_size));
    }
    if a.repeats == 0 || a.threads == 0 || a.batch_size == 0 || a.train_subset == 0 || a.test_subset == 0 {
        return Err(
            "--repeats, --threads, --batch-size, --train-subset and --test-subset must be at least 1".into(),
        );
    }
    if a.train_subset < a.world_size * a.batch_size {
        return Err(format!(
            "--train-subset {} gives a rank of {} less than one batch of {}",
            a.train_subset, a.world_size, a.batch_size
        ));
    }
    if a.device != "cpu" && a.device != "cuda" {
        return Err(format!("--device {}: expected cpu or cuda", a.device));
    }
    if let Some(bad) = a
        .lab_args
        .iter()
        .find(|x| !["--amp", "bf16", "off", "--channels-last", "--sync-batch-norm"].contains(&x.as_str()))
    {
        return Err(format!("--lab-args: `{bad}` is not one of the options both programs share (--amp bf16|off, --channels-last, --sync-batch-norm)"));
    }
    if !(0.0..=1024.0).contains(&a.allreduce_mb) {
        return Err(format!("--allreduce-mb must be between 0 and 1024, got {}", a.allreduce_mb));
    }
    Ok(())
}

fn main() -> ExitCode {
    // Ctrl-C or SIGTERM stops every rank this run started, then exits 130/143.
    launcher::stop_children_on_signals();
    let args = Args::parse();
    if let Err(message) = validate(&args) {
        eprintln!("error: {message}");
        return ExitCode::from(2);
    }
    Failure::exit(run(&args))
}

/// The allreduce benchmark's result at one size.
struct AllReduce {
    mb: f64,
    rust_gbps: f64,
    pytorch_gbps: f64,
    ratio: f64,
    paired_ratio: f64,
}

fn run(a: &Args) -> Result<(), Failure> {
    let env = probe_python(a.python.as_deref(), "lab_reference.py").map_err(Failure::BadInput)?;
    let lab = finished_lab_binary().map_err(Failure::BadInput)?;
    let data_dir = a.data_dir.clone().unwrap_or_else(|| workspace_root().join("data"));
    let kind: labkit::DatasetKind =
        a.dataset.parse().map_err(|e: labkit::DataError| Failure::BadInput(e.to_string()))?;
    // Prepared once here, so that no run pays for (or races on) making the files.
    let ready = labkit::ensure_dataset(&labkit::DatasetOptions {
        dir: data_dir.clone(),
        kind,
        download: Default::default(),
        generated: Default::default(),
    })
    .map_err(|e| Failure::BadInput(e.to_string()))?;
    eprintln!("{}", ready.summary());
    let settings = LabSettings {
        width: a.width.clone(),
        batch_size: a.batch_size,
        epochs: a.epochs,
        train_subset: Some(a.train_subset),
        test_subset: Some(a.test_subset),
        threads: Some(a.threads),
        device: a.device.clone(),
        dataset: ready.kind_used.to_string(),
        data_dir: data_dir.clone(),
        extra: a.lab_args.clone(),
    };
    if let Some(load) = load_average().filter(|&l| l > cpus() as f64 / 2.0) {
        eprintln!("warning: load average {load:.1} on {} CPUs: other work will add noise", cpus());
    }
    let load = load_average();
    let timeout = Duration::from_secs(a.timeout.max(1));
    let script: Vec<OsString> = vec![env.script.clone().into()];
    // figures[side][0 = world size N, 1 = one rank]: per-repeat steady images/sec of the job.
    let mut figures = [[Vec::new(), Vec::new()], [Vec::new(), Vec::new()]];
    let total = a.repeats * 4;
    let mut done = 0;
    for repeat in 0..a.repeats {
        let order =
            if repeat.is_multiple_of(2) { [Side::Rust, Side::PyTorch] } else { [Side::PyTorch, Side::Rust] };
        for (slot, ws) in [(0, a.world_size), (1, 1)] {
            for side in order {
                let (program, prefix) = match side {
                    Side::Rust => (&lab, &[][..]),
                    Side::PyTorch => (&env.python, &script[..]),
                };
                let out = run_lab(program, prefix, &settings, ws, timeout).map_err(Failure::Run)?;
                let ips = steady_images_per_sec(&out.epochs).unwrap_or(f64::NAN);
                done += 1;
                eprintln!("[{done}/{total}] {:7} {ws} rank{}: {ips:8.1} images/sec", side.name(), plural(ws));
                figures[side as usize][slot].push(ips);
            }
        }
    }
    let allreduce = if a.allreduce_mb > 0.0 { Some(measure_allreduce(a)?) } else { None };

    let med = |side: Side, slot: usize| median(&figures[side as usize][slot]);
    let ws = a.world_size as f64;
    let (rust_n, py_n) = (med(Side::Rust, 0), med(Side::PyTorch, 0));
    let (rust_1, py_1) = (med(Side::Rust, 1), med(Side::PyTorch, 1));
    let (rust_eff, py_eff) = (rust_n / ws / rust_1, py_n / ws / py_1);
    let yes = |b: bool| if b { "yes" } else { "no" };

    println!();
    println!(
        "Machine: {} CPUs ({}), {}; torch {}; load average at start {}",
        cpus(),
        cpu_model(),
        gpus(),
        env.torch_version,
        load.map_or("?".into(), |l| format!("{l:.2}"))
    );
    println!(
        "Settings: width {}, batch {} per rank, {} training / {} validation images, {} epochs (first dropped), {} thread{} per rank, {}{}, {} repeats (medians)",
        a.width,
        a.batch_size,
        a.train_subset,
        a.test_subset,
        a.epochs,
        a.threads,
        plural(a.threads),
        if a.device == "cuda" { "one GPU per rank (NCCL)" } else { "Gloo on CPU" },
        if a.lab_args.is_empty() { String::new() } else { format!(", {}", a.lab_args.join(" ")) },
        a.repeats
    );
    println!();
    println!("| measure | Rust | PyTorch | Rust ÷ PyTorch | target | met |");
    println!("|---|---:|---:|---:|---|---|");
    let n = a.world_size;
    println!(
        "| images/sec, {n} ranks (job) | {rust_n:.1} | {py_n:.1} | {:.3} | ≥ {RATIO_TARGET:.2} | {} |",
        rust_n / py_n,
        yes(rust_n / py_n >= RATIO_TARGET)
    );
    println!("| images/sec, 1 rank | {rust_1:.1} | {py_1:.1} | {:.3} | | |", rust_1 / py_1);
    println!(
        "| DDP efficiency, {n} ranks vs 1 | {rust_eff:.3} | {py_eff:.3} | {:.3} | ≥ {EFFICIENCY_TARGET:.2} and ≥ PyTorch's | {} |",
        rust_eff / py_eff,
        yes(rust_eff >= EFFICIENCY_TARGET && rust_eff >= py_eff)
    );
    if let Some(r) = &allreduce {
        println!(
            "| all_reduce {} MB, GB/s | {:.3} | {:.3} | {:.3} (paired {:.3}) | ≥ {ALLREDUCE_TARGET:.2} | {} |",
            r.mb,
            r.rust_gbps,
            r.pytorch_gbps,
            r.ratio,
            r.paired_ratio,
            yes(r.ratio >= ALLREDUCE_TARGET)
        );
    }
    println!();
    println!("DDP efficiency = (images/sec at {n} ranks ÷ {n}) ÷ images/sec at 1 rank.");

    if let Some(path) = &a.json {
        let list = |v: &[f64]| v.iter().map(|&x| json_num(x)).collect::<Vec<_>>().join(", ");
        let side_json = |s: Side| {
            format!(
                "{{\"images_per_sec_n\": {}, \"images_per_sec_1\": {}, \"efficiency\": {}, \"runs_n\": [{}], \"runs_1\": [{}]}}",
                json_num(med(s, 0)),
                json_num(med(s, 1)),
                json_num(med(s, 0) / ws / med(s, 1)),
                list(&figures[s as usize][0]),
                list(&figures[s as usize][1])
            )
        };
        let allreduce_json = allreduce.as_ref().map_or("null".to_string(), |r| {
            format!(
                "{{\"size_mb\": {}, \"rust_gb_per_s\": {}, \"pytorch_gb_per_s\": {}, \"ratio\": {}, \"paired_ratio\": {}}}",
                json_num(r.mb),
                json_num(r.rust_gbps),
                json_num(r.pytorch_gbps),
                json_num(r.ratio),
                json_num(r.paired_ratio)
            )
        });
        let json = format!(
            "{{\n  \"benchmark\": \"lab\",\n  \"cpus\": {},\n  \"cpu_model\": {},\n  \"torch_version\": {},\n  \"width\": {},\n  \"batch_size\": {},\n  \"train_subset\": {},\n  \"test_subset\": {},\n  \"epochs\": {},\n  \"threads_per_rank\": {},\n  \"world_size\": {},\n  \"repeats\": {},\n  \"rust\": {},\n  \"pytorch\": {},\n  \"ratio_n\": {},\n  \"allreduce\": {}\n}}\n",
            cpus(),
            json_str(&cpu_model()),
            json_str(&env.torch_version),
            json_str(&a.width),
            a.batch_size,
            a.train_subset,
            a.test_subset,
            a.epochs,
            a.threads,
            a.world_size,
            a.repeats,
            side_json(Side::Rust),
            side_json(Side::PyTorch),
            json_num(rust_n / py_n),
            allreduce_json
        );
        write_atomically(path, &json)
            .map_err(|e| Failure::Run(format!("writing {}: {e}", path.display())))?;
    }
    Ok(())
}

/// Runs the `allreduce` benchmark at one size and reads its JSON.
fn measure_allreduce(a: &Args) -> Result<AllReduce, Failure> {
    let bin = sibling_binary("ddp-bench", "allreduce").map_err(Failure::BadInput)?;
    let json_path = std::env::temp_dir().join(format!("ddp-bench-lab-allreduce-{}.json", std::process::id()));
    let mut cmd = Command::new(bin);
    cmd.args([
        "--sizes-mb",
        &a.allreduce_mb.to_string(),
        "--repeats",
        "7",
        "--threads",
        &a.threads.to_string(),
    ])
    .arg("--json")
    .arg(&json_path);
    if let Some(p) = &a.python {
        cmd.arg("--python").arg(p);
    }
    eprintln!("all_reduce: running the allreduce benchmark at {} MB", a.allreduce_mb);
    let out = launcher::output(cmd, None)
        .map_err(|e| Failure::Run(format!("cannot run the allreduce benchmark: {e}")))?;
    let text = std::fs::read_to_string(&json_path);
    let _ = std::fs::remove_file(&json_path);
    if !out.status.success() {
        return Err(Failure::Run(format!(
            "the allreduce benchmark failed ({}): {}",
            out.describe(),
            out.stderr
        )));
    }
    let text = text.map_err(|e| Failure::Run(format!("the allreduce benchmark wrote no JSON: {e}")))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Failure::Run(format!("the allreduce JSON: {e}")))?;
    let r = &v["results"][0];
    let num = |x: &serde_json::Value| x.as_f64().unwrap_or(f64::NAN);
    Ok(AllReduce {
        mb: a.allreduce_mb,
        rust_gbps: num(&r["rust"]["gb_per_s"]),
        pytorch_gbps: num(&r["pytorch"]["gb_per_s"]),
        ratio: num(&r["ratio"]),
        paired_ratio: num(&r["paired_ratio"]),
    })
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn gpus() -> String {
    match tch::Cuda::device_count() {
        0 => "no GPU".into(),
        n => format!("{n} × {}", labkit::perf::gpu_name().unwrap_or_else(|| "GPU".into())),
    }
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("model name").map(|r| r.trim_start_matches([' ', '\t', ':']).to_string())
            })
        })
        .unwrap_or_else(|| "unknown CPU".into())
}
