//! Running a job's ranks inside one sandbox ([`crate::sandbox`]), and reading back
//! what they left.
//!
//! The checker starts `bwrap … checker __sandboxed-job`: that supervisor, inside,
//! starts the ranks exactly as an unconfined run does ([`job::run_plain`]), so they
//! meet on the sandbox's own 127.0.0.1. When they have ended it sends back, on its
//! stdout, how each ended and the files of the work directory (each cut at the output
//! limit). The work directory inside is a size-capped tmpfs: a submission never writes
//! to the host's disk, and the checker writes what came back into the run's directory
//! itself, after the sandbox is gone.
//!
//! Only text comes back that way. A job that leaves files for a later job (step 12's
//! stopped run, its checkpoint for the resumed run) names their directories to carry:
//! every file under them comes back whole, binary included, within [`carried_budget`],
//! and the next job naming the same directories finds them in its own tmpfs, written
//! there by its supervisor before the ranks start. Still nothing inside writes outside.
//!
//! From step 5 the ranks download from the checker's local mirror, which counts the
//! downloads outside. The supervisor listens on the mirror's port inside and relays
//! each connection over a Unix socket to the checker: the mirror is the one thing
//! outside a job can reach, and it only serves the generated data set.
//!
//! The supervisor makes itself non-dumpable, so a rank (same user) cannot read its
//! memory or its descriptors; still, a submission runs beside it, so what a rank
//! reports about itself can be forged, as without a sandbox.
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::ExitStatusExt;
use std::path::{Component, Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::job::{self, Ended, Job, Launch};
use crate::sandbox::{JobCgroup, Mount, Sandbox};

/// The hidden subcommand the sandbox runs.
pub const SUPERVISOR: &str = "__sandboxed-job";

/// Environment variables a job may see of the checker's (everything else is cleared):
/// the lab's own settings and the runtime's tuning, never credentials.
const PASSED_ENV: [&str; 9] = [
    "PATH",
    "LD_LIBRARY_PATH",
    "LANG",
    "LC_ALL",
    "TZ",
    "RUST_BACKTRACE",
    "OMP_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
    "MKL_NUM_THREADS",
];
const PASSED_ENV_PREFIXES: [&str; 4] = ["DDP_LAB_", "NCCL_", "GLOO_", "TORCH_"];

/// How the ranks of a verification are confined.
#[derive(Clone)]
pub struct JobSandbox {
    pub sandbox: Sandbox,
    /// Paths a job reads: the shared data, libtorch, the repository's `.libtorch`.
    pub read_only: Vec<PathBuf>,
    /// The local mirror's port (on the host's 127.0.0.1), relayed into each job.
    pub mirror_port: Option<u16>,
    /// GPU device files to pass in.
    pub devices: Vec<PathBuf>,
}

impl JobSandbox {
    /// The confinement of a verification in repository `root`, reading `data`.
    pub fn new(sandbox: Sandbox, root: &Path, data: &Path) -> JobSandbox {
        let mut read_only = vec![data.to_path_buf(), root.join(".libtorch")];
        // The installed torch's directory holds libtorch and the CUDA libraries it
        // links (the binaries' run path points there).
        if let Ok(torch) = root.join(".libtorch").canonicalize() {
            read_only.push(torch.parent().map(Path::to_path_buf).unwrap_or(torch));
        }
        // Binaries built elsewhere (`--prebuilt`, on a node without the build's
        // `.libtorch`) find libtorch through LD_LIBRARY_PATH, which the jobs see.
        let ld_path = std::env::var("LD_LIBRARY_PATH").unwrap_or_default();
        for dir in library_dirs(&ld_path) {
            if !read_only.contains(&dir) {
                read_only.push(dir);
            }
        }
        let devices = gpu_devices();
        if !devices.is_empty() {
            read_only.push("/sys".into());
        }
        JobSandbox { sandbox, read_only, mirror_port: None, devices }
    }
}

/// The folders of an `LD_LIBRARY_PATH` that exist, each as its real path; for a torch's
/// `lib` folder, the `site-packages` above it, whose `nvidia/` holds the CUDA libraries
/// libtorch loads through its run path.
fn library_dirs(ld_library_path: &str) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for dir in ld_library_path.split(':').filter(|d| !d.is_empty()) {
        let Ok(real) = Path::new(dir).canonicalize() else { continue };
        let torch_lib = real.ends_with("torch/lib");
        let dir = match real.parent().and_then(Path::parent) {
            Some(site_packages) if torch_lib => site_packages.to_path_buf(),
            _ => real,
        };
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    dirs
}

/// The NVIDIA device files of this machine (none without a GPU).
fn gpu_devices() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir("/dev") else { return vec![] };
    let mut devices: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("nvidia")))
        .collect();
    devices.sort();
    devices
}

/// What the checker asks of the supervisor, on its stdin.
#[derive(Debug, Serialize, Deserialize)]
struct JobSpec {
    /// The step's binary, every process of the job runs it.
    bin: PathBuf,
    /// The work directory (a tmpfs inside).
    dir: PathBuf,
    launches: Vec<Launch>,
    limit_ms: u64,
    grace_ms: u64,
    /// The mirror relay, from step 5.
    relay: Option<RelaySpec>,
    /// How much of each rank's stdout and stderr comes back.
    output_bytes: u64,
    /// Directories of the work directory, relative to it, whose files come back whole.
    carry: Vec<String>,
    /// Their files the checker already has (relative path → bytes), written into the
    /// tmpfs before the ranks start.
    carried: BTreeMap<String, Bytes>,
    /// How many bytes the carried files may hold in all, each way.
    carried_bytes: u64,
}

/// Where the job's end of the mirror relay listens and what it connects to.
#[derive(Debug, Serialize, Deserialize)]
struct RelaySpec {
    /// The mirror's port, on 127.0.0.1 inside as outside.
    port: u16,
    /// The checker's Unix socket.
    socket: PathBuf,
}

/// The supervisor's answer, on its stdout: how each launch ended, in order, the
/// work directory's text files and the carried directories' files.
#[derive(Debug, Serialize, Deserialize)]
struct JobAnswer {
    ended: Vec<EndedInside>,
    /// Path relative to the work directory → content (cut as `collect_files` says).
    files: BTreeMap<String, String>,
    /// The carried directories' files, whole (path relative to the work directory).
    carried: BTreeMap<String, Bytes>,
    /// Why a file was not carried in or out ("… was not carried to the next run: …").
    not_carried: Vec<String>,
    seconds: f64,
}

/// A file's bytes, as base64 in the JSON that crosses the sandbox (a checkpoint is
/// binary; an array of numbers would be four times its size).
#[derive(Debug, Default, Clone, PartialEq)]
struct Bytes(Vec<u8>);

impl Serialize for Bytes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use base64::Engine;
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(&self.0))
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
        use base64::Engine;
        let text = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD.decode(text).map(Bytes).map_err(serde::de::Error::custom)
    }
}

/// How many bytes the carried files of one job may hold in all, each way: one file's
/// limit (a checkpoint of the lab's whole model is about 69 MB). They also fit the work
/// space, so the answer stays bounded: the text files plus this, as base64.
fn carried_budget(limits: &crate::sandbox::Limits) -> u64 {
    limits.file_size.min(limits.work_space)
}

/// How one process of the job ended, as the supervisor saw it.
#[derive(Debug, Serialize, Deserialize)]
struct EndedInside {
    pid: u32,
    /// The raw wait status; `None`: it never started.
    status: Option<i32>,
    timed_out: bool,
    left_behind: bool,
    elapsed_ms: u64,
    /// Its stdout was cut to `output_bytes`.
    out_cut: bool,
    /// Its stderr was.
    err_cut: bool,
}

/// Runs a job's launches as [`job::run_plain`] does, but all of them inside one
/// sandbox; their files land in `dir` afterwards. The files under `carry` (directories
/// of `dir`, relative to it) go in as the checker has them, and come back whole.
pub fn run_all(confine: &JobSandbox, job: &Job<'_>) -> Vec<Ended> {
    match run_confined(confine, job) {
        Ok(ended) => ended,
        Err(e) => job
            .launches
            .iter()
            .map(|l| Ended::not_started(&l.name, format!("could not run it in the sandbox: {e}")))
            .collect(),
    }
}

fn run_confined(confine: &JobSandbox, job: &Job<'_>) -> std::io::Result<Vec<Ended>> {
    let Job { bin, launches, dir, carry, limit, grace } = *job;
    let sandbox = &confine.sandbox;
    std::fs::create_dir_all(dir)?;
    let checker = supervisor_binary(dir.parent().unwrap_or(dir))?;
    let relay = match confine.mirror_port {
        Some(port) => Some(Relay::start(port)?),
        None => None,
    };
    let mut mounts: Vec<Mount> = vec![
        Mount::ReadOnly(checker.clone()),
        Mount::ReadOnly(bin.to_path_buf()),
        Mount::Scratch(dir.to_path_buf(), sandbox.limits.work_space),
    ];
    mounts.extend(confine.read_only.iter().cloned().map(Mount::ReadOnly));
    mounts.extend(confine.devices.iter().cloned().map(Mount::Device));
    if let Some(relay) = &relay {
        mounts.push(Mount::ReadOnly(relay.dir.clone()));
    }
    let mut env: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| {
            PASSED_ENV.contains(&k.as_str()) || PASSED_ENV_PREFIXES.iter().any(|p| k.starts_with(p))
        })
        .collect();
    env.push(("HOME".into(), dir.display().to_string()));
    env.push(("TMPDIR".into(), "/tmp".into()));
    let cgroup = JobCgroup::create(sandbox.capping, &sandbox.limits)?;
    let mut cmd =
        sandbox.job_command(cgroup.as_ref(), &checker, &[OsString::from(SUPERVISOR)], dir, &env, &mounts)?;
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let carried_bytes = carried_budget(&sandbox.limits);
    let mut not_carried = Vec::new();
    let mut carried = BTreeMap::new();
    for rel in carry {
        collect_carried(dir, rel, carried_bytes, &mut carried, &mut not_carried);
    }
    let spec = JobSpec {
        bin: bin.to_path_buf(),
        dir: dir.to_path_buf(),
        launches: launches.to_vec(),
        limit_ms: u64::try_from(limit.as_millis()).unwrap_or(u64::MAX),
        grace_ms: u64::try_from(grace.as_millis()).unwrap_or(u64::MAX),
        relay: relay.as_ref().map(|r| RelaySpec { port: r.port, socket: r.socket.clone() }),
        output_bytes: sandbox.limits.output,
        carry: carry.iter().map(|c| c.to_string()).collect(),
        carried,
        carried_bytes,
    };
    let spec = serde_json::to_vec(&spec).map_err(std::io::Error::other)?;
    let mut child = child_process::spawn(cmd)?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(&spec)?;
    }
    // The answer may be as large as the work space and the carried files (as base64);
    // anything beyond is not an answer.
    let answer_cap = sandbox.limits.work_space + carried_bytes.div_ceil(3) * 4 + (1 << 20);
    let answer = capped_reader(child.stdout.take(), answer_cap);
    let errors = capped_reader(child.stderr.take(), sandbox.limits.output);
    // The supervisor enforces `limit` and `grace` itself; this is the backstop should it
    // be stopped or starved.
    let status = match child.wait_timeout(limit + grace + Duration::from_secs(60))? {
        Some(status) => status,
        None => child.kill()?,
    };
    let answer = answer.join().unwrap_or_default();
    let errors = String::from_utf8_lossy(&errors.join().unwrap_or_default()).into_owned();
    let hit = cgroup.as_ref().map(JobCgroup::limits_hit).unwrap_or_default();
    let mut hit_limits = Vec::new();
    if hit.out_of_memory {
        hit_limits.push(format!("killed: out of memory (the job may use {})", bytes(sandbox.limits.memory)));
    }
    if hit.process_limit {
        hit_limits.push(format!(
            "the job reached its limit of {} processes (a fork was refused)",
            sandbox.limits.processes
        ));
    }
    drop(relay);
    let parsed = match serde_json::from_slice::<JobAnswer>(&answer) {
        Ok(parsed) if parsed.ended.len() == launches.len() => parsed,
        Ok(parsed) => {
            return Err(std::io::Error::other(format!(
                "the sandbox answered for {} process(es) of {}",
                parsed.ended.len(),
                launches.len()
            )))
        }
        // No answer, or half of one: the supervisor itself was killed, by the kernel at
        // the job's memory limit when the job's tmpfs holds it (freeing nothing by
        // killing ranks), so say which limit.
        Err(_) => {
            return Err(std::io::Error::other(format!(
                "the sandbox ended ({}) without an answer{}{}{}",
                child_process::describe(status),
                hit_limits.iter().map(|l| format!("; {l}")).collect::<String>(),
                if errors.trim().is_empty() { "" } else { ": " },
                errors.trim()
            )))
        }
    };
    // The checker writes the files itself, outside the sandbox, under `dir` only; the
    // carried ones last, whole (a carried `checkpoint.json` is also a text file), and
    // only under the directories it asked for.
    for (rel, text) in &parsed.files {
        if let Some(path) = inside(dir, rel) {
            if let Some(parent) = path.parent() {
                let _ = std::fs::create_dir_all(parent);
            }
            let _ = std::fs::write(path, text);
        }
    }
    for (rel, bytes) in &parsed.carried {
        if let Some(path) = inside(dir, rel).filter(|_| under_any(rel, carry)) {
            if let Some(parent) = path.parent() {
                let _ = std::fs::create_dir_all(parent);
            }
            if let Err(e) = atomic_file::write_atomically(&path, &bytes.0) {
                not_carried.push(format!("{rel} could not be written back: {e}"));
            }
        }
    }
    not_carried.extend(parsed.not_carried.iter().cloned());
    hit_limits.extend(not_carried);
    let text = |name: &str| parsed.files.get(name).cloned().unwrap_or_default();
    let mut ended = Vec::new();
    for (launch, got) in launches.iter().zip(&parsed.ended) {
        let mut e = Ended {
            name: launch.name.clone(),
            pid: got.pid,
            status: got.status.map(ExitStatus::from_raw),
            timed_out: got.timed_out,
            stdout: text(&format!("{}.stdout", launch.name)),
            stderr: text(&format!("{}.stderr", launch.name)),
            elapsed: Duration::from_millis(got.elapsed_ms),
            left_behind: got.left_behind,
            limits: hit_limits.clone(),
        };
        if e.status.and_then(|s| s.signal()) == Some(libc::SIGXFSZ) {
            e.limits.push(format!("killed: a file reached the limit of {}", bytes(sandbox.limits.file_size)));
        }
        for (stream, was_cut) in [("stdout", got.out_cut), ("stderr", got.err_cut)] {
            if was_cut {
                e.limits.push(format!("its {stream} was cut at {}", bytes(sandbox.limits.output)));
            }
        }
        ended.push(e);
    }
    Ok(ended)
}

/// The binary a job's sandbox runs as its supervisor: this very one, or, where it was
/// replaced on disk while running (rebuilt by cargo meanwhile: `cargo build` in another
/// terminal, or a test that builds the checker beside one that grades), a copy of the
/// running one in `runs`.
///
/// One copy for the whole process, made once and whole before any job runs it: jobs run
/// side by side, and a copy per job under one name was rewritten and removed by one job
/// while another started from it (seen: "bwrap: execvp …checker: No such file or
/// directory", the comparison's runs not started). Copies of processes that have ended
/// are removed when the next one is made.
fn supervisor_binary(runs: &Path) -> std::io::Result<PathBuf> {
    supervisor_binary_of(std::env::current_exe()?, Path::new("/proc/self/exe"), runs)
}

/// [`supervisor_binary`] for the binary at `running` (its path as the kernel gives it),
/// readable at `exe`.
fn supervisor_binary_of(running: PathBuf, exe: &Path, runs: &Path) -> std::io::Result<PathBuf> {
    if !running.to_string_lossy().ends_with(" (deleted)") {
        return Ok(running);
    }
    static COPY: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);
    let mut copy = COPY.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(path) = copy.as_ref().filter(|p| p.exists()) {
        return Ok(path.clone());
    }
    let path = copy_of_running_binary(exe, runs, std::process::id())?;
    *copy = Some(path.clone());
    Ok(path)
}

/// Whether process `pid` exists (another user's included).
fn process_exists(pid: i32) -> bool {
    // SAFETY: kill(2) with signal 0 only asks; EPERM means it exists but is not ours.
    unsafe { libc::kill(pid, 0) == 0 || *libc::__errno_location() == libc::EPERM }
}

const SUPERVISOR_COPY_PREFIX: &str = "supervisor-";
const SUPERVISOR_COPY_SUFFIX: &str = ".checker";

/// Copies `exe` to `runs/supervisor-<pid>.checker` (written aside, then renamed into
/// place, so that no job can start from half a file), after removing the copies of
/// processes that no longer exist.
fn copy_of_running_binary(exe: &Path, runs: &Path, pid: u32) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(runs)?;
    for entry in std::fs::read_dir(runs)?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let owner = name
            .strip_prefix(SUPERVISOR_COPY_PREFIX)
            .and_then(|rest| rest.split('.').next())
            .and_then(|n| n.parse::<i32>().ok());
        if owner.is_some_and(|p| p != pid as i32 && !process_exists(p)) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    let path = runs.join(format!("{SUPERVISOR_COPY_PREFIX}{pid}{SUPERVISOR_COPY_SUFFIX}"));
    let partial = path.with_extension("partial");
    std::fs::copy(exe, &partial)?;
    std::fs::rename(&partial, &path)?;
    Ok(path)
}

/// "6 GiB", "256 MiB".
pub fn bytes(n: u64) -> String {
    const MIB: u64 = 1 << 20;
    if n.is_multiple_of(1024 * MIB) {
        format!("{} GiB", n / (1024 * MIB))
    } else {
        format!("{} MiB", n / MIB)
    }
}

/// Reads `from` to its end on a thread, keeping at most `cap` bytes (the rest is read
/// and dropped, so the writer never blocks).
fn capped_reader<R: Read + Send + 'static>(from: Option<R>, cap: u64) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let Some(mut from) = from else { return kept };
        let mut buf = [0u8; 64 * 1024];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 {
                break;
            }
            let room = (cap as usize).saturating_sub(kept.len());
            kept.extend_from_slice(&buf[..n.min(room)]);
        }
        kept
    })
}

/// The checker's end of the mirror relay: a Unix socket each connection of the job
/// arrives on, forwarded to the mirror's TCP port on the host.
struct Relay {
    dir: PathBuf,
    socket: PathBuf,
    port: u16,
    stop: Arc<AtomicBool>,
}

impl Relay {
    fn start(port: u16) -> std::io::Result<Relay> {
        use std::sync::atomic::AtomicUsize;
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "ddp-lab-relay-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)?;
        let socket = dir.join("mirror.sock");
        let listener = UnixListener::bind(&socket)?;
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((inside, _)) => {
                        let _ = inside.set_nonblocking(false);
                        if let Ok(outside) = std::net::TcpStream::connect(("127.0.0.1", port)) {
                            pump_both(inside, outside);
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        Ok(Relay { dir, socket, port, stop })
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Copies each way between a Unix and a TCP connection until either side closes.
fn pump_both(unix: UnixStream, tcp: std::net::TcpStream) {
    let (Ok(unix2), Ok(tcp2)) = (unix.try_clone(), tcp.try_clone()) else { return };
    std::thread::spawn(move || pump(unix, tcp, |t| t.shutdown(std::net::Shutdown::Write)));
    std::thread::spawn(move || pump(tcp2, unix2, |u| u.shutdown(std::net::Shutdown::Write)));
}

fn pump<R: Read, W: Write>(mut from: R, mut to: W, close: impl FnOnce(&W) -> std::io::Result<()>) {
    let _ = std::io::copy(&mut from, &mut to);
    let _ = close(&to);
}

/// `checker __sandboxed-job`: inside the sandbox, reads the job from stdin, runs it,
/// answers on stdout.
pub fn supervise() -> std::process::ExitCode {
    // SAFETY: prctl with constant arguments.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
    }
    let mut input = String::new();
    if let Err(e) = std::io::stdin().read_to_string(&mut input) {
        eprintln!("{SUPERVISOR}: cannot read the job from stdin: {e}");
        return std::process::ExitCode::from(2);
    }
    let spec: JobSpec = match serde_json::from_str(&input) {
        Ok(spec) => spec,
        Err(e) => {
            // Only the checker starts this; a spec it cannot read is a checker bug.
            eprintln!("{SUPERVISOR}: the job spec on stdin is not one this checker writes: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    if let Some(relay) = spec.relay {
        relay_inside(relay.port, relay.socket);
    }
    let cap = usize::try_from(spec.output_bytes).unwrap_or(usize::MAX);
    let (limit, grace) = (Duration::from_millis(spec.limit_ms), Duration::from_millis(spec.grace_ms));
    let started = Instant::now();
    // The carried files first: the ranks find them where an earlier job left them.
    let mut not_carried = Vec::new();
    for (rel, bytes) in &spec.carried {
        let Some(path) = inside(&spec.dir, rel).filter(|_| under_any(rel, &spec.carry)) else { continue };
        let written = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|_| std::fs::write(&path, &bytes.0));
        if let Err(e) = written {
            not_carried.push(format!("{rel} could not be carried into the job's work directory: {e}"));
        }
    }
    let ended = job::run_supervised(&Job {
        bin: &spec.bin,
        launches: &spec.launches,
        dir: &spec.dir,
        carry: &[],
        limit,
        grace,
    });
    let mut files = BTreeMap::new();
    let mut cut = BTreeMap::new();
    collect_files(&spec.dir, &spec.dir, cap, &mut files, &mut cut);
    let mut carried = BTreeMap::new();
    for rel in &spec.carry {
        collect_carried(&spec.dir, rel, spec.carried_bytes, &mut carried, &mut not_carried);
    }
    let was_cut = |name: String| cut.get(&name).copied().unwrap_or(false);
    let ended = ended
        .iter()
        .map(|e| EndedInside {
            pid: e.pid,
            status: e.status.map(|s| s.into_raw()),
            timed_out: e.timed_out,
            left_behind: e.left_behind,
            elapsed_ms: u64::try_from(e.elapsed.as_millis()).unwrap_or(u64::MAX),
            out_cut: was_cut(format!("{}.stdout", e.name)),
            err_cut: was_cut(format!("{}.stderr", e.name)),
        })
        .collect();
    let answer = JobAnswer { ended, files, carried, not_carried, seconds: started.elapsed().as_secs_f64() };
    let Ok(answer) = serde_json::to_vec(&answer) else { return std::process::ExitCode::from(2) };
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(&answer);
    let _ = out.flush();
    std::process::ExitCode::SUCCESS
}

/// Every regular file under `dir`, as text, the stdout/stderr of a rank cut to its
/// last `cap` bytes (where the error is), a trace file to its first `cap` × 8.
fn collect_files(
    root: &Path,
    dir: &Path,
    cap: usize,
    files: &mut BTreeMap<String, String>,
    cut: &mut BTreeMap<String, bool>,
) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else { continue };
        let path = entry.path();
        if kind.is_dir() {
            collect_files(root, &path, cap, files, cut);
            continue;
        }
        if !kind.is_file() {
            continue;
        }
        let rel = path.strip_prefix(root).unwrap_or(&path).to_string_lossy().into_owned();
        let output = rel.ends_with(".stdout") || rel.ends_with(".stderr");
        // Data files a rank downloaded are not read back: only text the checks judge.
        if !output && !rel.ends_with(".jsonl") && !rel.ends_with(".json") {
            continue;
        }
        let limit = if output { cap } else { cap * 8 };
        let Some((kept, was_cut)) = read_capped(&path, limit, output) else { continue };
        cut.insert(rel.clone(), was_cut);
        files.insert(rel, String::from_utf8_lossy(&kept).into_owned());
    }
}

/// Every regular file under `root`/`carry` (a directory of the work directory),
/// whole, into `carried` while they hold at most `budget` bytes in all; each file that
/// does not fit is left out, and `not_carried` says why. Links are not followed.
fn collect_carried(
    root: &Path,
    carry: &str,
    budget: u64,
    carried: &mut BTreeMap<String, Bytes>,
    not_carried: &mut Vec<String>,
) {
    let Some(top) = inside(root, carry) else { return };
    let mut held: u64 = carried.values().map(|b| b.0.len() as u64).sum();
    let mut pending = vec![top];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        let mut entries: Vec<_> = entries.flatten().collect();
        // In name order: which files fit the budget does not depend on the directory's order.
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let Ok(kind) = entry.file_type() else { continue };
            let path = entry.path();
            if kind.is_dir() {
                pending.push(path);
                continue;
            }
            if !kind.is_file() {
                continue;
            }
            let rel = path.strip_prefix(root).unwrap_or(&path).to_string_lossy().into_owned();
            let len = entry.metadata().map(|m| m.len()).unwrap_or(u64::MAX);
            if held.saturating_add(len) > budget {
                not_carried.push(format!(
                    "{rel} ({len} bytes) was not carried to the next run: the carried files may hold {} in all",
                    bytes(budget)
                ));
                continue;
            }
            // Read no more than announced: a file growing meanwhile is cut, not unbounded.
            let Some((kept, _)) = read_capped(&path, len as usize, false) else { continue };
            held += kept.len() as u64;
            carried.insert(rel, Bytes(kept));
        }
    }
}

/// `dir`/`rel` where `rel` is a plain relative path (no `..`, not absolute).
fn inside(dir: &Path, rel: &str) -> Option<PathBuf> {
    let rel = Path::new(rel);
    let plain =
        rel.components().next().is_some() && rel.components().all(|c| matches!(c, Component::Normal(_)));
    plain.then(|| dir.join(rel))
}

/// Whether `rel` lies under one of the `carry` directories.
fn under_any(rel: &str, carry: &[impl AsRef<str>]) -> bool {
    carry.iter().any(|c| Path::new(rel).starts_with(c.as_ref()) && Path::new(rel) != Path::new(c.as_ref()))
}

/// At most `limit` bytes of the file at `path`: its end (`tail`) or its start, and
/// whether some was left out. Never reads more than it keeps.
fn read_capped(path: &Path, limit: usize, tail: bool) -> Option<(Vec<u8>, bool)> {
    use std::io::{Seek, SeekFrom};
    let mut file = std::fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let was_cut = len > limit as u64;
    if was_cut && tail {
        file.seek(SeekFrom::Start(len - limit as u64)).ok()?;
    }
    let mut kept = Vec::new();
    file.take(limit as u64).read_to_end(&mut kept).ok()?;
    Some((kept, was_cut))
}

/// The job's end of the mirror relay: 127.0.0.1:`port` inside, each connection carried
/// over the Unix socket to the checker.
fn relay_inside(port: u16, socket: PathBuf) {
    let Ok(listener) = std::net::TcpListener::bind(("127.0.0.1", port)) else { return };
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            if let Ok(unix) = UnixStream::connect(&socket) {
                pump_both(unix, conn);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sandboxed_job_reads_the_libraries_ld_library_path_names() {
        let venv = tempfile::tempdir().unwrap();
        let site = venv.path().join("lib/python3.11/site-packages");
        std::fs::create_dir_all(site.join("torch/lib")).unwrap();
        let other = venv.path().join("other");
        std::fs::create_dir_all(&other).unwrap();
        let path = format!(
            "{}::{}:/nonexistent/lib:{}",
            site.join("torch/lib").display(),
            other.display(),
            other.display()
        );
        let real = |p: &Path| p.canonicalize().unwrap();
        assert_eq!(library_dirs(&path), [real(&site), real(&other)]);
        assert!(library_dirs("").is_empty());
    }

    #[test]
    fn jobs_side_by_side_share_one_whole_copy_of_a_replaced_checker() {
        let runs = tempfile::tempdir().unwrap();
        let exe = runs.path().join("the-running-binary");
        std::fs::write(&exe, binary(1 << 20)).unwrap();
        // A copy left by a process that has ended, and one of a process still running.
        let dead =
            runs.path().join(format!("{SUPERVISOR_COPY_PREFIX}{}{SUPERVISOR_COPY_SUFFIX}", i32::MAX - 1));
        let alive = runs.path().join(format!("{SUPERVISOR_COPY_PREFIX}1{SUPERVISOR_COPY_SUFFIX}"));
        std::fs::write(&dead, "stale").unwrap();
        std::fs::write(&alive, "init's").unwrap();
        let replaced = PathBuf::from("/work/target/debug/checker (deleted)");
        let copies: Vec<PathBuf> = std::thread::scope(|scope| {
            let jobs: Vec<_> = (0..8)
                .map(|_| scope.spawn(|| supervisor_binary_of(replaced.clone(), &exe, runs.path()).unwrap()))
                .collect();
            jobs.into_iter().map(|j| j.join().unwrap()).collect()
        });
        assert!(copies.iter().all(|c| c == &copies[0]), "one copy for every job: {copies:?}");
        assert_eq!(std::fs::read(&copies[0]).unwrap(), binary(1 << 20), "whole");
        assert!(!dead.exists(), "the ended process's copy is removed");
        assert!(alive.exists(), "a running process's copy is kept");
        // A binary not replaced is run as it is.
        let here = PathBuf::from("/work/target/debug/checker");
        assert_eq!(supervisor_binary_of(here.clone(), &exe, runs.path()).unwrap(), here);
    }

    /// Bytes that are not text: every byte value, a NUL first.
    fn binary(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i % 256) as u8).collect()
    }

    #[test]
    fn a_carried_directory_comes_back_whole_and_nothing_else_does() {
        let work = tempfile::tempdir().unwrap();
        let carried_dir = work.path().join("resumed-checkpoints");
        std::fs::create_dir_all(carried_dir.join("nested")).unwrap();
        std::fs::write(carried_dir.join("weights.safetensors"), binary(1000)).unwrap();
        std::fs::write(carried_dir.join("nested/more.bin"), binary(10)).unwrap();
        std::fs::write(work.path().join("elsewhere.bin"), binary(10)).unwrap();
        // A link is not followed: the checker never writes what it points at.
        std::os::unix::fs::symlink("/etc/passwd", carried_dir.join("link")).unwrap();
        let (mut carried, mut not_carried) = (BTreeMap::new(), Vec::new());
        collect_carried(work.path(), "resumed-checkpoints", 1 << 20, &mut carried, &mut not_carried);
        let names: Vec<&str> = carried.keys().map(String::as_str).collect();
        assert_eq!(names, ["resumed-checkpoints/nested/more.bin", "resumed-checkpoints/weights.safetensors"]);
        assert_eq!(carried["resumed-checkpoints/weights.safetensors"].0, binary(1000));
        assert!(not_carried.is_empty(), "{not_carried:?}");
    }

    #[test]
    fn files_over_the_carried_budget_are_left_out_and_said_so() {
        let work = tempfile::tempdir().unwrap();
        let dir = work.path().join("ckpt");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.bin"), binary(600)).unwrap();
        std::fs::write(dir.join("b.bin"), binary(600)).unwrap();
        let (mut carried, mut not_carried) = (BTreeMap::new(), Vec::new());
        collect_carried(work.path(), "ckpt", 1000, &mut carried, &mut not_carried);
        assert_eq!(carried.keys().collect::<Vec<_>>(), ["ckpt/a.bin"], "the first in name order fits");
        assert_eq!(not_carried.len(), 1, "{not_carried:?}");
        assert!(
            not_carried[0].starts_with("ckpt/b.bin (600 bytes) was not carried to the next run"),
            "{not_carried:?}"
        );
    }

    #[test]
    fn only_plain_paths_under_a_carried_directory_are_written() {
        let dir = Path::new("/work/run");
        assert_eq!(inside(dir, "ckpt/a.bin"), Some(dir.join("ckpt/a.bin")));
        for outside in ["../escape", "/etc/passwd", "ckpt/../../escape", ""] {
            assert_eq!(inside(dir, outside), None, "{outside:?}");
        }
        assert!(under_any("ckpt/a.bin", &["ckpt"]));
        assert!(!under_any("ckpt", &["ckpt"]), "the directory itself is not a file of it");
        assert!(!under_any("ckptx/a.bin", &["ckpt"]), "a path component, not a prefix of the name");
        assert!(!under_any("other/a.bin", &["ckpt"]));
    }

    #[test]
    fn bytes_cross_as_base64_and_come_back_the_same() {
        let answer = JobAnswer {
            ended: vec![],
            files: BTreeMap::new(),
            carried: BTreeMap::from([("ckpt/w.bin".to_string(), Bytes(binary(300)))]),
            not_carried: vec![],
            seconds: 0.0,
        };
        let json = serde_json::to_string(&answer).unwrap();
        assert!(json.contains("\"ckpt/w.bin\":\"AAECAw"), "{json}");
        let back: JobAnswer = serde_json::from_str(&json).unwrap();
        assert_eq!(back.carried["ckpt/w.bin"], Bytes(binary(300)));
        assert!(serde_json::from_str::<JobAnswer>(&json.replace("AAECAw", "!!!!")).is_err());
    }
}
