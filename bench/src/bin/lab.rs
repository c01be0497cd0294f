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
//!
//! `--world-size 1` runs only the 1-rank configuration (efficiency is then n/a);
//! `--device cuda` with more ranks than GPUs lets the ranks share them on both sides;
//! `--compile` adds the reference under `torch.compile` as a third column.
use std::process::{Command, ExitCode};
use std::time::Duration;

use clap::Parser;
use ddp_bench::common::{load_average, median, probe_python, PythonEnv};
use ddp_bench::labbench::{
    column_prefix, columns, describe_placement, placement, shared_extra_args, validate, world_sizes, Args,
    Column,
};
use lab_program::{
    finished_lab_binary, run_lab, sibling_binary, steady_images_per_sec, workspace_root, write_atomically,
    Failure, LabRun, LabSettings,
};
use serde_json::json;

const RATIO_TARGET: f64 = 1.15;
const EFFICIENCY_TARGET: f64 = 0.90;
const ALLREDUCE_TARGET: f64 = 0.98;

fn main() -> ExitCode {
    ddp_bench::common::check_collectives_as_pytorch();
    // Ctrl-C or SIGTERM stops every rank this run started, then exits 130/143.
    child_process::stop_children_on_signals();
    let args = Args::parse();
    let gpus = tch::Cuda::device_count().max(0) as usize;
    if let Err(message) = validate(&args, gpus) {
        eprintln!("error: {message}");
        return ExitCode::from(2);
    }
    Failure::exit(run(&args, gpus))
}

/// The allreduce benchmark's result at one size.
struct AllReduce {
    mb: f64,
    rust_gbps: f64,
    pytorch_gbps: f64,
    ratio: f64,
    paired_ratio: f64,
}

/// Index of the `--world-size` configuration in a column's figures; [`ONE`] is 1 rank.
const N: usize = 0;
const ONE: usize = 1;

fn run(a: &Args, gpus: usize) -> Result<(), Failure> {
    let env = probe_python(a.python.as_deref(), "lab_reference.py").map_err(Failure::BadInput)?;
    let lab = finished_lab_binary().map_err(Failure::BadInput)?;
    let data_dir = a.data_dir.clone().unwrap_or_else(|| workspace_root().join("data"));
    let placement = placement(a, gpus);
    let mut settings = LabSettings {
        width: a.width.clone(),
        batch_size: a.batch_size,
        epochs: a.epochs,
        train_subset: Some(a.train_subset),
        test_subset: Some(a.test_subset),
        threads: Some(a.threads),
        device: a.device.clone(),
        dataset: a.dataset.clone(),
        data_dir,
        extra: shared_extra_args(a, placement),
    };
    // Prepared once here, so that no run pays for (or races on) making the files.
    let ready = settings.prepare_data().map_err(|e| Failure::BadInput(e.to_string()))?;
    eprintln!("{}", ready.summary());
    if let Some(load) = load_average().filter(|&l| l > cpus() as f64 / 2.0) {
        eprintln!("warning: load average {load:.1} on {} CPUs: other work will add noise", cpus());
    }
    let load = load_average();
    let timeout = Duration::from_secs(a.timeout.max(1));
    let columns = columns(a);
    let sizes = world_sizes(a);
    // figures[column][N or ONE]: per-repeat steady images/sec of the job.
    let mut figures = vec![[Vec::new(), Vec::new()]; columns.len()];
    let total = a.repeats * sizes.len() * columns.len();
    let mut done = 0;
    for repeat in 0..a.repeats {
        // Alternating which side goes first, so that slow drifts of the machine hit all alike.
        let mut order: Vec<usize> = (0..columns.len()).collect();
        if repeat % 2 == 1 {
            order.reverse();
        }
        for &ws in &sizes {
            let slot = if ws == 1 { ONE } else { N };
            for &c in &order {
                let program = if columns[c] == Column::Rust { &lab } else { &env.python };
                let prefix = column_prefix(columns[c], &env.script, a.compile.as_deref());
                let run = LabRun { prefix: &prefix, world_size: ws, timeout };
                let out = run_lab(program, &settings, run).map_err(Failure::Run)?;
                let ips = steady_images_per_sec(&out.epochs).unwrap_or(f64::NAN);
                done += 1;
                eprintln!(
                    "[{done}/{total}] {:16} {ws} rank{}: {ips:8.1} images/sec",
                    columns[c].name(),
                    plural(ws)
                );
                figures[c][slot].push(ips);
            }
        }
    }
    let allreduce = if a.allreduce_mb > 0.0 { Some(measure_allreduce(a)?) } else { None };

    let n = a.world_size;
    let distributed = n > 1;
    let med = |c: usize, slot: usize| median(&figures[c][slot]);
    // Per-rank images/sec at N ranks over 1 rank's; not applicable at world size 1.
    let efficiency = |c: usize| if distributed { med(c, N) / n as f64 / med(c, ONE) } else { f64::NAN };
    let compiled = columns.iter().position(|&c| c == Column::Compiled);
    let (rust, py) = (0, 1);
    let yes = |b: bool| if b { "yes" } else { "no" };
    let machine = machine_line(&env, gpus, load);
    let settings_line = format!(
        "Settings: width {}, batch {} per rank, {} training / {} validation images, {} epochs (first dropped), {} thread{} per rank, {}{}{}, {} repeats (medians)",
        a.width,
        a.batch_size,
        a.train_subset,
        a.test_subset,
        a.epochs,
        a.threads,
        plural(a.threads),
        describe_placement(placement, n),
        if a.lab_args.is_empty() { String::new() } else { format!(", {}", a.lab_args.join(" ")) },
        a.compile.as_ref().map_or(String::new(), |m| format!(", torch.compile mode {m}")),
        a.repeats
    );

    println!();
    println!("{machine}");
    println!("{settings_line}");
    println!();
    let compiled_head = if compiled.is_some() { " PyTorch compiled | Rust ÷ compiled |" } else { "" };
    let compiled_rule = if compiled.is_some() { "---:|---:|" } else { "" };
    println!("| measure | Rust | PyTorch | Rust ÷ PyTorch |{compiled_head} target | met |");
    println!("|---|---:|---:|---:|{compiled_rule}---|---|");
    // The compiled column's two cells for a row, from the Rust figure and the compiled one.
    let compiled_cells = |rust_value: f64, value: f64, digits: usize| match compiled {
        Some(_) => format!(" {value:.digits$} | {:.3} |", rust_value / value),
        None => String::new(),
    };
    let row = |label: String, slot: usize, target: &str, met: &str| {
        let (r, p) = (med(rust, slot), med(py, slot));
        let c = compiled.map_or(String::new(), |c| compiled_cells(r, med(c, slot), 1));
        println!("| {label} | {r:.1} | {p:.1} | {:.3} |{c} {target} | {met} |", r / p);
    };
    if distributed {
        let ratio = med(rust, N) / med(py, N);
        row(
            format!("images/sec, {n} ranks (job)"),
            N,
            &format!("≥ {RATIO_TARGET:.2}"),
            yes(ratio >= RATIO_TARGET),
        );
    }
    row("images/sec, 1 rank".into(), ONE, "", "");
    if distributed {
        let (re, pe) = (efficiency(rust), efficiency(py));
        let c = compiled.map_or(String::new(), |c| compiled_cells(re, efficiency(c), 3));
        println!(
            "| DDP efficiency, {n} ranks vs 1 | {re:.3} | {pe:.3} | {:.3} |{c} ≥ {EFFICIENCY_TARGET:.2} and ≥ PyTorch's | {} |",
            re / pe,
            yes(re >= EFFICIENCY_TARGET && re >= pe)
        );
    } else {
        let c = if compiled.is_some() { " n/a | n/a |" } else { "" };
        println!("| DDP efficiency | n/a | n/a | n/a |{c} | n/a |");
    }
    if let Some(r) = &allreduce {
        let c = if compiled.is_some() { " | |" } else { "" };
        println!(
            "| all_reduce {} MB, GB/s | {:.3} | {:.3} | {:.3} (paired {:.3}) |{c} ≥ {ALLREDUCE_TARGET:.2} | {} |",
            r.mb,
            r.rust_gbps,
            r.pytorch_gbps,
            r.ratio,
            r.paired_ratio,
            yes(r.ratio >= ALLREDUCE_TARGET)
        );
    }
    println!();
    if distributed {
        println!("DDP efficiency = (images/sec at {n} ranks ÷ {n}) ÷ images/sec at 1 rank.");
    } else {
        println!("DDP efficiency: not applicable at --world-size 1 (only the 1-rank configuration ran).");
    }

    if let Some(path) = &a.json {
        // serde_json writes NaN (a configuration that did not run) as null.
        let column_json = |c: usize| {
            json!({
                "images_per_sec_n": if distributed { med(c, N) } else { f64::NAN },
                "images_per_sec_1": med(c, ONE),
                "efficiency": efficiency(c),
                "runs_n": figures[c][N],
                "runs_1": figures[c][ONE],
            })
        };
        let ratio = |c: usize, slot: usize| med(rust, slot) / med(c, slot);
        let json = json!({
            "benchmark": "lab",
            "machine": machine,
            "settings": settings_line,
            "cpus": cpus(),
            "cpu_model": cpu_model(),
            "gpus": gpus,
            "gpu_name": gpu_name(&env, gpus),
            "device": a.device,
            "placement": describe_placement(placement, n),
            "torch_version": env.torch_version,
            "width": a.width,
            "batch_size": a.batch_size,
            "train_subset": a.train_subset,
            "test_subset": a.test_subset,
            "epochs": a.epochs,
            "threads_per_rank": a.threads,
            "world_size": n,
            "repeats": a.repeats,
            "lab_args": a.lab_args,
            "compile": a.compile,
            "rust": column_json(rust),
            "pytorch": column_json(py),
            "pytorch_compiled": compiled.map(column_json),
            "ratio_n": if distributed { ratio(py, N) } else { f64::NAN },
            "ratio_1": ratio(py, ONE),
            "ratio_compiled_n": compiled.map(|c| if distributed { ratio(c, N) } else { f64::NAN }),
            "ratio_compiled_1": compiled.map(|c| ratio(c, ONE)),
            "allreduce": allreduce.as_ref().map(|r| json!({
                "size_mb": r.mb,
                "rust_gb_per_s": r.rust_gbps,
                "pytorch_gb_per_s": r.pytorch_gbps,
                "ratio": r.ratio,
                "paired_ratio": r.paired_ratio,
            })),
        });
        let text =
            serde_json::to_string_pretty(&json).map_err(|e| Failure::Run(format!("the JSON: {e}")))? + "\n";
        write_atomically(path, &text)
            .map_err(|e| Failure::Run(format!("writing {}: {e}", path.display())))?;
    }
    Ok(())
}

/// `Machine: 16 CPUs (…), 1 × NVIDIA H100 80GB HBM3; torch …; load average at start …`.
fn machine_line(env: &PythonEnv, gpus: usize, load: Option<f64>) -> String {
    let gpu_part = match gpu_name(env, gpus) {
        Some(name) => format!("{gpus} × {name}"),
        None if gpus > 0 => format!("{gpus} GPU{}", plural(gpus)),
        None => "no GPU".into(),
    };
    format!(
        "Machine: {} CPUs ({}), {gpu_part}; torch {}; load average at start {}",
        cpus(),
        cpu_model(),
        env.torch_version,
        load.map_or("?".into(), |l| format!("{l:.2}"))
    )
}

/// The first GPU's name: nvidia-smi's (labkit's MFU line uses the same), else torch's.
fn gpu_name(env: &PythonEnv, gpus: usize) -> Option<String> {
    if gpus == 0 {
        return None;
    }
    labkit::perf::gpu_name().or_else(|| env.gpu_name.clone())
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
    let out = child_process::output(cmd, None)
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
