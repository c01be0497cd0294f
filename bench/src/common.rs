//! What the benchmark binaries share: finding the Python side, ports, statistics, and
//! reporting results.
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use lab_program::workspace_root;
use serde_json::Value;
use tch_distributed as dist;

/// The Python side of a benchmark: the interpreter, its script, and the libtorch each
/// side loads.
pub struct PythonEnv {
    pub python: PathBuf,
    pub script: PathBuf,
    pub torch_version: String,
    /// Canonical lib directories of the libtorch each side loads.
    pub rust_libtorch: PathBuf,
    pub python_libtorch: PathBuf,
    /// The first GPU's name as torch sees it (None without a GPU): the machine line's
    /// fallback where nvidia-smi is missing.
    pub gpu_name: Option<String>,
}

/// Checks that `python` (default: the workspace's `.venv/bin/python`) imports torch with
/// Gloo and that `bench/python/<script>` exists; the message says what to do if not.
pub fn probe_python(python: Option<&Path>, script: &str) -> Result<PythonEnv, String> {
    let python = python.map(Path::to_path_buf).unwrap_or_else(|| workspace_root().join(".venv/bin/python"));
    let script = python_dir().join(script);
    if !script.is_file() {
        return Err(format!("the PyTorch rank script {} is missing", script.display()));
    }
    const PROBE: &str = "import os, torch, torch.distributed as d\n\
        assert d.is_available() and d.is_gloo_available(), 'torch.distributed with Gloo is not available'\n\
        print(torch.__version__)\n\
        print(os.path.join(os.path.dirname(torch.__file__), 'lib'))\n\
        print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')\n";
    let mut probe = Command::new(&python);
    probe.args(["-c", PROBE]);
    let out = child_process::output(probe, None).map_err(|e| {
        format!(
            "cannot run the Python interpreter {} ({e}): run scripts/setup.sh (it creates the workspace's .venv), or pass --python",
            python.display()
        )
    })?;
    if !out.status.success() {
        let stderr = &out.stderr;
        let last = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no message");
        return Err(format!(
            "{} cannot import torch with torch.distributed (Gloo): {last}\nrun scripts/setup.sh (it installs torch into the workspace's .venv), or pass --python",
            python.display()
        ));
    }
    let mut lines = out.stdout.lines();
    let torch_version = lines.next().unwrap_or("?").trim().to_string();
    let python_lib = PathBuf::from(lines.next().unwrap_or("").trim());
    let gpu_name = lines.next().map(str::trim).filter(|n| !n.is_empty()).map(String::from);
    let rust_lib = PathBuf::from(env!("DDP_BENCH_LIBTORCH_LIB"));
    let canonical = |p: PathBuf| std::fs::canonicalize(&p).unwrap_or(p);
    Ok(PythonEnv {
        python,
        script,
        torch_version,
        rust_libtorch: canonical(rust_lib),
        python_libtorch: canonical(python_lib),
        gpu_name,
    })
}

/// `bench/python/`, the PyTorch side's scripts: in the workspace, or under the folder
/// `DDP_LAB_ROOT` names (a GPU bundle carries them there).
pub fn python_dir() -> PathBuf {
    workspace_root().join("bench").join("python")
}

/// The 1-minute load average (Linux), to tell a busy machine from a slow benchmark.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}

/// The median (the mean of the middle two for an even count); NaN for none.
pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut s = values.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Which program a measurement ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Rust,
    PyTorch,
}

impl Side {
    pub fn name(self) -> &'static str {
        match self {
            Side::Rust => "Rust",
            Side::PyTorch => "PyTorch",
        }
    }
}

/// Rust ranks run as PyTorch's do by default: no collective checked across ranks
/// (tch-distributed checks Gloo's by default, PyTorch only under
/// `TORCH_DISTRIBUTED_DEBUG=DETAIL`), so that a side-by-side figure compares the same
/// work. Call first in `main`, before any thread or rank starts: the rank processes
/// inherit it.
pub fn check_collectives_as_pytorch() {
    std::env::set_var(tch_distributed::CHECK_COLLECTIVES_ENV, "0");
}

/// How a side-by-side benchmark times its runs (`#[command(flatten)]` into its options).
#[derive(clap::Args, Debug, Clone)]
pub struct Timing {
    /// Untimed steps before the timed ones.
    #[arg(long, default_value_t = 3)]
    pub warmup: usize,
    /// Timed steps per run.
    #[arg(long, default_value_t = 20)]
    pub steps: usize,
    /// Runs per mode (and side), in alternating order; the figures are their medians.
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
}

/// A benchmark binary's `main` around `run`: collectives unchecked as PyTorch's (see
/// [`check_collectives_as_pytorch`]), Ctrl-C or SIGTERM stopping every rank the run
/// started (then exit 130/143), and an error printed under the binary's `name`: exit 1
/// from a rank process, 2 from the runner (bad options, a missing Python, a failed rank).
pub fn bench_main(
    name: &str,
    is_rank: bool,
    run: impl FnOnce() -> Result<(), Box<dyn std::error::Error>>,
) -> ExitCode {
    check_collectives_as_pytorch();
    child_process::stop_children_on_signals();
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e}");
            ExitCode::from(if is_rank { 1 } else { 2 })
        }
    }
}

/// Starts `world_size` ranks of one program (`program` then `args`) on this machine:
/// env:// on a free loopback port, Gloo on the loopback device, `threads` OpenMP threads
/// each, in `bench/python/` (where the PyTorch scripts import their helpers). Waits for
/// them and hands back each rank's `result {json}` line, in rank order. A failing rank
/// stops the others; the error shows its last lines.
pub fn run_ranks(
    program: &Path,
    args: &[String],
    world_size: usize,
    threads: usize,
) -> Result<Vec<Value>, String> {
    let port = child_process::free_port().map_err(|e| format!("no free port for the rendezvous: {e}"))?;
    let mut children: Vec<child_process::Child> = Vec::new();
    for rank in 0..world_size {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .env(dist::RANK_ENV, rank.to_string())
            .env(dist::WORLD_SIZE_ENV, world_size.to_string())
            .env(dist::MASTER_ADDR_ENV, "127.0.0.1")
            .env(dist::MASTER_PORT_ENV, port.to_string())
            .env("OMP_NUM_THREADS", threads.to_string())
            // The same Gloo device on both sides: loopback.
            .env("GLOO_SOCKET_IFNAME", "lo")
            .current_dir(python_dir())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child =
            child_process::spawn(cmd).map_err(|e| format!("cannot start {}: {e}", program.display()))?;
        children.push(child);
    }
    // Each rank's stdout and stderr read on threads, so that polling never blocks.
    let readers: Vec<_> = children
        .iter_mut()
        .map(|c| {
            let (out, err) = (c.stdout.take().expect("piped"), c.stderr.take().expect("piped"));
            let read_all = |mut pipe: Box<dyn Read + Send>| {
                std::thread::spawn(move || {
                    let mut text = String::new();
                    let _ = pipe.read_to_string(&mut text);
                    text
                })
            };
            (read_all(Box::new(out)), read_all(Box::new(err)))
        })
        .collect();
    // One rank failed: the others would only wait for it until the timeout.
    let statuses = child_process::watch_then_kill(&mut children, &child_process::Watch::default())
        .map_err(|e| format!("watching the ranks of {}: {e}", program.display()))?;
    let mut results = Vec::new();
    for (rank, (reader, status)) in readers.into_iter().zip(statuses).enumerate() {
        let (out, err) = (reader.0.join().unwrap_or_default(), reader.1.join().unwrap_or_default());
        let result = out
            .lines()
            .find_map(|l| l.strip_prefix("result "))
            .and_then(|v| serde_json::from_str::<Value>(v).ok());
        match result {
            Some(r) if status.success() => results.push(r),
            _ => {
                let tail: Vec<&str> =
                    err.lines().rev().take(15).collect::<Vec<_>>().into_iter().rev().collect();
                return Err(format!(
                    "{} {} rank {rank} failed ({status}); its last lines:\n{}",
                    program.display(),
                    args.first().map_or("", String::as_str),
                    tail.join("\n")
                ));
            }
        }
    }
    Ok(results)
}
