//! all_reduce bandwidth of tch-distributed (Rust) against `torch.distributed` (Python),
//! both over libtorch's own ProcessGroupGloo, on CPU, with the ranks on this machine.
//!
//!     cargo run -p ddp-bench --release --bin allreduce
//!     cargo run -p ddp-bench --release --bin allreduce -- --sizes-mb 1,4 --repeats 3 --json out.json
//!
//! The runner starts `--world-size` Rust ranks (this binary, `--rank-process`) and as many
//! PyTorch ranks (`bench/python/allreduce.py`), each side its own Gloo group over env://
//! with MASTER_ADDR=127.0.0.1. The ranks stay up for the whole run and obey one command
//! at a time on stdin (`run NUMEL WARMUP ITERS`, answered by `done SECONDS_PER_OP` on
//! stdout, or `quit`), so only one side works at any moment while the other waits idle,
//! and Rust and PyTorch measurements alternate (R,P then P,R) at every repeat.
//!
//! A repeat's time per op is the slowest rank's (the time all ranks took); a side's
//! result for a size is the median over repeats. Bandwidth is algorithmic:
//! message bytes / seconds per all_reduce. Nothing here asserts on timings.
use std::error::Error;
use std::io::{BufRead, BufReader, Write};
use std::net::ToSocketAddrs;
use std::path::PathBuf;
use std::process::{ChildStdin, Command, ExitCode, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use clap::Parser;
use ddp_bench::common::{load_average, median, probe_python, PythonEnv, Side};
use lab_program::write_atomically;
use serde_json::{json, Value};
use tch::{Device, Kind, Tensor};
use tch_distributed as dist;

type Res<T> = Result<T, Box<dyn Error>>;

/// The ratio Rust ÷ PyTorch bandwidth that counts as "as fast".
const TARGET: f64 = 0.98;
const MIB: f64 = (1u64 << 20) as f64;
const F32_BYTES: u64 = 4;

#[derive(Parser, Debug)]
#[command(
    about = "all_reduce bandwidth, Rust (tch-distributed) vs PyTorch (torch.distributed): Gloo, CPU, ranks on this machine"
)]
struct Args {
    /// Message sizes in MB (MiB, 2^20 bytes) of float32, comma-separated (fractions allowed).
    #[arg(long, value_delimiter = ',', default_value = "4,16,64")]
    sizes_mb: Vec<f64>,
    /// Untimed all_reduces before each timed block.
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// Timed all_reduces per repeat.
    #[arg(long, default_value_t = 10)]
    iters: usize,
    /// Timed blocks per size and side; the result is their median.
    #[arg(long, default_value_t = 15)]
    repeats: usize,
    /// Intra-op threads per rank, the same on both sides (tch::set_num_threads /
    /// torch.set_num_threads, and OMP_NUM_THREADS).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Ranks per side.
    #[arg(long, default_value_t = 2)]
    world_size: usize,
    /// Python interpreter with torch [default: <workspace>/.venv/bin/python].
    #[arg(long)]
    python: Option<PathBuf>,
    /// Also write the results as JSON to this file (atomically).
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
    /// Network interface for Gloo on both sides (sets GLOO_SOCKET_IFNAME), e.g. `lo`.
    /// Without it each side uses its default: Rust binds 127.0.0.1, PyTorch this host's name.
    #[arg(long, value_name = "IFACE")]
    gloo_ifname: Option<String>,
    /// Seconds before a missing rank or a stuck collective is an error.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
    /// Internal: run as one Rust rank (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set).
    #[arg(long, hide = true)]
    rank_process: bool,
}

fn main() -> ExitCode {
    ddp_bench::common::check_collectives_as_pytorch();
    // Ctrl-C or SIGTERM stops every rank first (the ranks themselves never start any).
    child_process::stop_children_on_signals();
    let args = Args::parse();
    if args.rank_process {
        return match rank_main(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("rust rank {}: error: {e}", std::env::var(dist::RANK_ENV).unwrap_or_default());
                ExitCode::FAILURE
            }
        };
    }
    if let Err(message) = validate(&args) {
        eprintln!("error: {message}");
        return ExitCode::from(2);
    }
    let env = match probe_python(args.python.as_deref(), "allreduce.py") {
        Ok(env) => env,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(2);
        }
    };
    match run(&args, &env) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn validate(args: &Args) -> Result<(), String> {
    if args.sizes_mb.is_empty() {
        return Err("--sizes-mb needs one or more sizes".into());
    }
    if let Some(mb) = args.sizes_mb.iter().find(|&&mb| !(mb * MIB >= F32_BYTES as f64 && mb <= 65536.0)) {
        return Err(format!("--sizes-mb: {mb} MB is not between 4 bytes and 65536 MB"));
    }
    if args.iters == 0 || args.repeats == 0 {
        return Err("--iters and --repeats must be at least 1".into());
    }
    if args.threads == 0 || args.threads > 1024 {
        return Err(format!("--threads must be between 1 and 1024, got {}", args.threads));
    }
    if !(1..=64).contains(&args.world_size) {
        return Err(format!("--world-size must be between 1 and 64, got {}", args.world_size));
    }
    if args.timeout == 0 {
        return Err("--timeout must be at least 1 second".into());
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// One Rust rank.

fn rank_main(args: &Args) -> Res<()> {
    tch::set_num_threads(args.threads as i32);
    dist::init_process_group(
        dist::Backend::Gloo,
        dist::InitOptions { timeout: Duration::from_secs(args.timeout), ..Default::default() },
    )?;
    let rank = dist::get_rank()?;
    let world = dist::get_world_size()?;
    if !answer(&format!("ready threads={}", tch::get_num_threads())) {
        return Ok(()); // the runner is gone
    }

    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            [] => continue,
            ["quit"] => {
                dist::destroy_process_group()?;
                return Ok(());
            }
            ["run", numel, warmup, iters] => {
                let seconds = timed_all_reduce(numel.parse()?, warmup.parse()?, iters.parse()?, rank, world)?;
                if !answer(&format!("done {seconds:.9e}")) {
                    return Ok(());
                }
            }
            _ => return Err(format!("bad command {line:?}").into()),
        }
    }
    Ok(()) // end of input: the runner is gone
}

/// Writes one line to the runner; false when it is gone (its end of the pipe closed).
fn answer(line: &str) -> bool {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").and_then(|()| out.flush()).is_ok()
}

/// What bench/python/allreduce.py does for `run`, step for step.
fn timed_all_reduce(numel: i64, warmup: usize, iters: usize, rank: usize, world: usize) -> Res<f64> {
    let mut tensor = Tensor::full([numel], (rank + 1) as f64, (Kind::Float, Device::Cpu));
    dist::all_reduce(&mut tensor, dist::ReduceOp::Sum)?;
    let expected = (world * (world + 1) / 2) as f64;
    let (first, last) = (tensor.double_value(&[0]), tensor.double_value(&[numel - 1]));
    if first != expected || last != expected {
        return Err(format!("all_reduce gave {first}, {last}, expected {expected}").into());
    }
    let _ = tensor.zero_();
    for _ in 0..warmup {
        dist::all_reduce(&mut tensor, dist::ReduceOp::Sum)?;
    }
    dist::barrier()?;
    let start = Instant::now();
    for _ in 0..iters {
        dist::all_reduce(&mut tensor, dist::ReduceOp::Sum)?;
    }
    Ok(start.elapsed().as_secs_f64() / iters as f64)
}

// ---------------------------------------------------------------------------------------
// The Python side: interpreter, script, libtorch.

/// Where each side's Gloo device binds, as c10d decides it.
fn gloo_binding(args: &Args) -> (String, String) {
    if let Some(iface) = gloo_iface(args) {
        let both = format!("interface {iface} (GLOO_SOCKET_IFNAME)");
        return (both.clone(), both);
    }
    // tch-distributed: a loopback MASTER_ADDR makes it bind 127.0.0.1.
    let rust = "127.0.0.1 (loopback MASTER_ADDR)".to_string();
    // PyTorch: createDefaultDevice binds the address this host's name resolves to.
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string());
    let python = match host {
        Ok(host) if !host.is_empty() => match (host.as_str(), 0).to_socket_addrs() {
            Ok(mut addrs) => match addrs.next().map(|a| a.ip()) {
                Some(ip) => {
                    format!("{ip} (host name {host}){}", if ip.is_loopback() { "" } else { ", not loopback" })
                }
                None => format!("127.0.0.1 (host name {host} does not resolve)"),
            },
            Err(_) => format!("127.0.0.1 (host name {host} does not resolve)"),
        },
        _ => "this host's name (unknown)".to_string(),
    };
    (rust, python)
}

fn gloo_iface(args: &Args) -> Option<String> {
    args.gloo_ifname.clone().or_else(|| std::env::var("GLOO_SOCKET_IFNAME").ok().filter(|s| !s.is_empty()))
}

// ---------------------------------------------------------------------------------------
// The ranks of both sides, driven over their stdin/stdout.

struct Rank {
    side: Side,
    rank: usize,
    child: child_process::Child,
    stdin: Option<ChildStdin>,
    reaped: bool,
}

impl child_process::Poll for Rank {
    fn poll(&mut self) -> std::io::Result<Option<std::process::ExitStatus>> {
        // A reaped child keeps its status.
        self.child.try_wait()
    }
}

impl Rank {
    fn label(&self) -> String {
        format!("{} rank {}", self.side.name(), self.rank)
    }
}

/// A line a rank wrote on stdout (`None`: its stdout closed, i.e. it exited).
struct Event {
    index: usize,
    line: Option<String>,
}

/// Every rank process. Dropping it kills and reaps whatever is still running (each
/// rank is a `child_process::Child`), so no error path leaves processes behind.
struct Ranks {
    ranks: Vec<Rank>,
    tx: Sender<Event>,
    rx: Receiver<Event>,
}

impl Ranks {
    fn new() -> Ranks {
        let (tx, rx) = mpsc::channel();
        Ranks { ranks: Vec::new(), tx, rx }
    }

    fn spawn(&mut self, side: Side, rank: usize, mut cmd: Command) -> Res<()> {
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut child = child_process::spawn(cmd)
            .map_err(|e| format!("cannot start {} rank {rank}: {e}", side.name()))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let index = self.ranks.len();
        let tx = self.tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                match line {
                    Ok(line) => {
                        if tx.send(Event { index, line: Some(line) }).is_err() {
                            return;
                        }
                    }
                    Err(_) => break,
                }
            }
            let _ = tx.send(Event { index, line: None });
        });
        self.ranks.push(Rank { side, rank, child, stdin, reaped: false });
        Ok(())
    }

    /// Sends one command line to every rank of `side`.
    fn send(&mut self, side: Side, command: &str) -> Res<()> {
        for r in self.ranks.iter_mut().filter(|r| r.side == side) {
            let label = r.label();
            let stdin = r.stdin.as_mut().ok_or_else(|| format!("{label}: its input is closed"))?;
            writeln!(stdin, "{command}")
                .and_then(|()| stdin.flush())
                .map_err(|e| format!("{label} stopped listening ({e})"))?;
        }
        Ok(())
    }

    /// Waits for one line starting with `prefix` from every rank of `side` (`None`: from
    /// every rank) and returns the rest of each line, by rank. Any other output, an exit,
    /// or the deadline is an error.
    fn collect(&mut self, side: Option<Side>, prefix: &str, within: Duration) -> Res<Vec<String>> {
        let expected: Vec<usize> =
            (0..self.ranks.len()).filter(|&i| side.is_none_or(|s| self.ranks[i].side == s)).collect();
        let mut got: Vec<Option<String>> = vec![None; self.ranks.len()];
        let deadline = Instant::now() + within;
        while expected.iter().any(|&i| got[i].is_none()) {
            let left = deadline.saturating_duration_since(Instant::now());
            let event = match self.rx.recv_timeout(left.min(Duration::from_millis(500))) {
                Ok(event) => event,
                Err(RecvTimeoutError::Timeout) if left.is_zero() => {
                    let missing: Vec<String> = expected
                        .iter()
                        .filter(|&&i| got[i].is_none())
                        .map(|&i| self.ranks[i].label())
                        .collect();
                    return Err(format!(
                        "no answer within {within:?} from {} (raise --timeout if they are just slow)",
                        missing.join(", ")
                    )
                    .into());
                }
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => unreachable!("we hold a sender"),
            };
            let label = self.ranks[event.index].label();
            let Some(line) = event.line else {
                let status = self.exit_status(event.index);
                return Err(format!("{label} exited ({status}); see its messages above").into());
            };
            match line.strip_prefix(prefix) {
                Some(rest) if expected.contains(&event.index) && got[event.index].is_none() => {
                    got[event.index] = Some(rest.trim().to_string());
                }
                _ => return Err(format!("unexpected output from {label}: {line:?}").into()),
            }
        }
        Ok(expected.into_iter().map(|i| got[i].take().unwrap_or_default()).collect())
    }

    /// The exit status of a rank whose output closed (it is killed if still running).
    fn exit_status(&mut self, index: usize) -> String {
        let r = &mut self.ranks[index];
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            match r.child.try_wait() {
                Ok(Some(status)) => {
                    r.reaped = true;
                    return status.to_string();
                }
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                _ => return "output closed".to_string(),
            }
        }
    }

    /// Asks every rank to leave its group and exit; kills those that do not in time.
    fn shutdown(&mut self, within: Duration) -> Res<()> {
        for r in &mut self.ranks {
            if let Some(mut stdin) = r.stdin.take() {
                let _ = writeln!(stdin, "quit");
            } // dropping stdin closes it: a rank that missed "quit" sees end of input
        }
        // Every rank may take until the deadline: one that fails does not stop the others'
        // shutdown.
        let how = child_process::Watch { limit: Some(within), after_failure: None, ..Default::default() };
        let watched = child_process::watch(&mut self.ranks, &how);
        let mut failures = Vec::new();
        for (r, status) in self.ranks.iter_mut().zip(watched.statuses) {
            r.reaped = true;
            match status {
                Some(status) if !status.success() => {
                    failures.push(format!("{} exited with {status}", r.label()))
                }
                Some(_) => {}
                None => {
                    let _ = r.child.kill();
                    failures.push(format!("{} did not exit within {within:?}; killed", r.label()));
                }
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(format!("shutting the ranks down: {}", failures.join("; ")).into())
        }
    }
}

// ---------------------------------------------------------------------------------------
// The run.

/// One side's measurements at one size.
struct Samples {
    /// Per repeat: the slowest rank's seconds per all_reduce.
    seconds: Vec<f64>,
}

impl Samples {
    fn median(&self) -> f64 {
        median(&self.seconds)
    }

    /// Half the min–max range over repeats, relative to the median.
    fn spread(&self) -> f64 {
        let min = self.seconds.iter().copied().fold(f64::INFINITY, f64::min);
        let max = self.seconds.iter().copied().fold(0.0, f64::max);
        (max - min) / 2.0 / self.median()
    }
}

struct SizeResult {
    mb: f64,
    bytes: u64,
    rust: Samples,
    pytorch: Samples,
}

impl SizeResult {
    fn gbps(&self, side: Side) -> f64 {
        let s = match side {
            Side::Rust => &self.rust,
            Side::PyTorch => &self.pytorch,
        };
        self.bytes as f64 / s.median() / 1e9
    }

    fn ratio(&self) -> f64 {
        self.gbps(Side::Rust) / self.gbps(Side::PyTorch)
    }

    /// Median over repeats of PyTorch's time ÷ Rust's time in the same (adjacent) pair:
    /// less sensitive to slow drifts of a busy machine than the ratio of medians.
    fn paired_ratio(&self) -> f64 {
        let ratios: Vec<f64> =
            self.pytorch.seconds.iter().zip(&self.rust.seconds).map(|(p, r)| p / r).collect();
        median(&ratios)
    }
}

fn run(args: &Args, env: &PythonEnv) -> Res<()> {
    let (rust_bind, python_bind) = gloo_binding(args);
    let same_lib = env.rust_libtorch == env.python_libtorch;
    eprintln!("PyTorch side: {} (torch {})", env.python.display(), env.torch_version);
    eprintln!(
        "libtorch: Rust {}, PyTorch {}{}",
        env.rust_libtorch.display(),
        env.python_libtorch.display(),
        if same_lib { " (the same)" } else { " (DIFFERENT: the comparison is not like for like)" }
    );
    eprintln!("Gloo binds: Rust {rust_bind}; PyTorch {python_bind}");
    let load = load_average();
    if let (Some(load), Ok(cpus)) = (load, std::thread::available_parallelism()) {
        if load > cpus.get() as f64 / 2.0 {
            eprintln!(
                "note: load average {load:.1} on {cpus} CPUs: other work is running, so the timings will be noisy"
            );
        }
    }

    let ports = child_process::free_ports(2)?;
    let exe = std::env::current_exe()?;
    let threads = args.threads.to_string();
    let timeout = args.timeout.to_string();
    let mut ranks = Ranks::new();
    for (side, port) in [(Side::Rust, ports[0]), (Side::PyTorch, ports[1])] {
        for rank in 0..args.world_size {
            let mut cmd = match side {
                Side::Rust => {
                    let mut c = Command::new(&exe);
                    c.args(["--rank-process", "--threads", &threads, "--timeout", &timeout]);
                    c
                }
                Side::PyTorch => {
                    let mut c = Command::new(&env.python);
                    c.arg(&env.script).args(["--threads", &threads, "--timeout", &timeout]);
                    c
                }
            };
            cmd.env(dist::RANK_ENV, rank.to_string())
                .env(dist::WORLD_SIZE_ENV, args.world_size.to_string())
                .env(dist::MASTER_ADDR_ENV, "127.0.0.1")
                .env(dist::MASTER_PORT_ENV, port.to_string())
                .env("OMP_NUM_THREADS", &threads)
                .env("PYTHONUNBUFFERED", "1");
            if let Some(iface) = &args.gloo_ifname {
                cmd.env("GLOO_SOCKET_IFNAME", iface);
            }
            ranks.spawn(side, rank, cmd)?;
        }
    }
    eprintln!(
        "started {n} Rust ranks (rendezvous 127.0.0.1:{}) and {n} PyTorch ranks (127.0.0.1:{}); waiting for their groups",
        ports[0],
        ports[1],
        n = args.world_size
    );
    let ready = ranks.collect(None, "ready", Duration::from_secs(args.timeout + 60))?;
    let mut reported_threads = Vec::new();
    for (r, info) in ranks.ranks.iter().zip(&ready) {
        let t = info.split_whitespace().find_map(|w| w.strip_prefix("threads=")).unwrap_or("?");
        if t != threads {
            return Err(format!("{} runs {t} intra-op threads, not {threads}", r.label()).into());
        }
        reported_threads.push(t.to_string());
    }

    let per_run = Duration::from_secs(args.timeout).saturating_mul((args.warmup + args.iters + 3) as u32);
    let mut results = Vec::new();
    for &mb in &args.sizes_mb {
        let numel = (mb * MIB / F32_BYTES as f64).round() as u64;
        let bytes = numel * F32_BYTES;
        let command = format!("run {numel} {} {}", args.warmup, args.iters);
        let mut rust = Samples { seconds: Vec::new() };
        let mut pytorch = Samples { seconds: Vec::new() };
        for repeat in 0..args.repeats {
            // R,P then P,R: slow drifts of the machine hit both sides alike.
            let order =
                if repeat % 2 == 0 { [Side::Rust, Side::PyTorch] } else { [Side::PyTorch, Side::Rust] };
            for side in order {
                ranks.send(side, &command)?;
                let answers = ranks.collect(Some(side), "done", per_run)?;
                let mut slowest = 0.0f64;
                for a in &answers {
                    let s: f64 =
                        a.parse().map_err(|_| format!("{} rank sent a bad time {a:?}", side.name()))?;
                    slowest = slowest.max(s);
                }
                eprintln!(
                    "  {mb:>5} MB  repeat {}/{}  {:<7}  {:8.3} ms/op  {:6.3} GB/s",
                    repeat + 1,
                    args.repeats,
                    side.name(),
                    slowest * 1e3,
                    bytes as f64 / slowest / 1e9
                );
                match side {
                    Side::Rust => rust.seconds.push(slowest),
                    Side::PyTorch => pytorch.seconds.push(slowest),
                }
            }
        }
        results.push(SizeResult { mb, bytes, rust, pytorch });
    }
    let shutdown = ranks.shutdown(Duration::from_secs(30));
    drop(ranks);

    print_table(args, &results, same_lib);
    if let Some(path) = &args.json {
        let json = to_json(args, env, &rust_bind, &python_bind, load, &results);
        write_atomically(path, &json).map_err(|e| format!("writing {}: {e}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    shutdown
}

fn print_table(args: &Args, results: &[SizeResult], same_lib: bool) {
    println!(
        "all_reduce(SUM) of float32, {} rank(s) per side, Gloo on CPU over loopback, {} intra-op thread(s) per rank",
        args.world_size, args.threads
    );
    println!(
        "{} warmup + {} timed ops per repeat; time per op = the slowest rank's; median of {} repeats; R,P / P,R interleaved",
        args.warmup, args.iters, args.repeats
    );
    println!("GB/s = message bytes / seconds per all_reduce (1 MB = 2^20 B, 1 GB = 10^9 B)");
    println!(
        "paired = median over repeats of the Rust ÷ PyTorch ratio of back-to-back measurements (robust to drift)"
    );
    println!("spread = half the min-max range over repeats, relative to the median");
    if !same_lib {
        println!("WARNING: the two sides load different libtorch builds");
    }
    println!();
    println!(
        "{:>9}  {:>9}  {:>12}  {:>14}  {:>11}  {:>6}  {:>21}",
        "size",
        "Rust GB/s",
        "PyTorch GB/s",
        "Rust ÷ PyTorch",
        format!("≥ {TARGET:.2} met"),
        "paired",
        "spread Rust / PyTorch"
    );
    for r in results {
        let ratio = r.ratio();
        println!(
            "{:>9}  {:>9.3}  {:>12.3}  {:>14.3}  {:>11}  {:>6.3}  {:>21}",
            format!("{} MB", r.mb),
            r.gbps(Side::Rust),
            r.gbps(Side::PyTorch),
            ratio,
            if ratio >= TARGET { "yes" } else { "NO" },
            r.paired_ratio(),
            format!("±{:.1}% / ±{:.1}%", r.rust.spread() * 100.0, r.pytorch.spread() * 100.0)
        );
    }
}

// ---------------------------------------------------------------------------------------
// JSON (serde_json; a non-finite figure becomes null).

fn json_side(r: &SizeResult, side: Side) -> Value {
    let s = match side {
        Side::Rust => &r.rust,
        Side::PyTorch => &r.pytorch,
    };
    json!({
        "gb_per_s": r.gbps(side),
        "seconds_per_op": s.median(),
        "spread": s.spread(),
        "seconds_per_op_by_repeat": s.seconds,
    })
}

fn to_json(
    args: &Args,
    env: &PythonEnv,
    rust_bind: &str,
    python_bind: &str,
    load: Option<f64>,
    results: &[SizeResult],
) -> String {
    let rows: Vec<Value> = results
        .iter()
        .map(|r| {
            json!({
                "size_mb": r.mb,
                "bytes": r.bytes,
                "rust": json_side(r, Side::Rust),
                "pytorch": json_side(r, Side::PyTorch),
                "ratio": r.ratio(),
                "paired_ratio": r.paired_ratio(),
                "meets_target": r.ratio() >= TARGET,
            })
        })
        .collect();
    let report = json!({
        "benchmark": "all_reduce",
        "op": "sum",
        "dtype": "float32",
        "backend": "gloo",
        "device": "cpu",
        "world_size": args.world_size,
        "threads_per_rank": args.threads,
        "warmup": args.warmup,
        "iters": args.iters,
        "repeats": args.repeats,
        "statistic": "median over repeats of the slowest rank's seconds per op",
        "bandwidth": "algorithmic: bytes / seconds per op; GB = 1e9 B, MB = 2^20 B",
        "target_ratio": TARGET,
        "python": env.python.display().to_string(),
        "torch_version": env.torch_version,
        "rust_libtorch": env.rust_libtorch.display().to_string(),
        "python_libtorch": env.python_libtorch.display().to_string(),
        "same_libtorch": env.rust_libtorch == env.python_libtorch,
        "gloo_bind_rust": rust_bind,
        "gloo_bind_pytorch": python_bind,
        "load_average_at_start": load,
        "results": rows,
    });
    serde_json::to_string_pretty(&report).expect("JSON of plain values") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_is_json_with_every_size_and_null_for_no_figure() {
        let args = Args::parse_from(["allreduce"]);
        let env = PythonEnv {
            python: "/usr/bin/python3".into(),
            script: "allreduce.py".into(),
            torch_version: "2.11.0 \"cpu\"".into(),
            rust_libtorch: "/lib".into(),
            python_libtorch: "/lib".into(),
            gpu_name: None,
        };
        let result = SizeResult {
            mb: 4.0,
            bytes: 4 << 20,
            rust: Samples { seconds: vec![0.002, 0.003] },
            pytorch: Samples { seconds: vec![] },
        };
        let text = to_json(&args, &env, "127.0.0.1", "127.0.0.1", None, &[result]);
        let v: Value = serde_json::from_str(&text).expect("valid JSON");
        assert_eq!(v["torch_version"], "2.11.0 \"cpu\"");
        assert_eq!(v["same_libtorch"], true);
        assert_eq!(v["load_average_at_start"], Value::Null);
        let row = &v["results"][0];
        assert_eq!(row["bytes"], 4 << 20);
        assert_eq!(row["rust"]["seconds_per_op_by_repeat"], json!([0.002, 0.003]));
        assert_eq!(row["pytorch"]["seconds_per_op"], Value::Null, "no samples: no figure, not NaN");
    }
}
