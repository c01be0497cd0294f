//! Reliability of the finished lab program (solutions/step_11, and solutions/step_09
//! where a launcher starts the ranks as torchrun does; solutions/step_13 for what
//! `--pipeline` refuses): faults, bad input,
//! checkpoints and resume, a restart under torchrun, two nodes over real TCP.
//!
//! Every process is started through the launcher (its own process group, dying with
//! this test binary) and killed with its group when a test ends early, so that a
//! failing test never leaves ranks behind. Time limits here
//! bound hangs; none of them measures speed.
use std::io::ErrorKind as IoErrorKind;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use lab_trace::{event, Record, Trace};
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root().join("target"))
}

/// Builds solutions 9, 11, 12 and 13 once and returns the binaries' folder.
fn built() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        // As a plain `cargo build` runs: the build `cargo test` made is reused, not redone.
        let mut cmd = child_process::cargo();
        cmd.current_dir(root()).args([
            "build",
            "-q",
            "-p",
            "solution_09",
            "-p",
            "solution_11",
            "-p",
            "solution_12",
            "-p",
            "solution_13",
        ]);
        let status = child_process::status(cmd).expect("run cargo build");
        assert!(status.success(), "building the solution crates failed");
        target_dir().join("debug")
    })
}

fn bin(step: u8) -> PathBuf {
    built().join(lab_course::Version::Solution(step).package_name())
}

/// The data directory the solution tests share (the stand-in is generated once).
fn data_dir() -> PathBuf {
    target_dir().join("ddp-lab-test-data")
}

fn scratch(name: &str) -> PathBuf {
    let dir = target_dir().join("tmp").join(format!("reliability-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A tiny CPU run on the generated set, plus `extra` (whose options replace the
/// defaults of the same name).
fn lab_args(extra: &[&str]) -> Vec<String> {
    let data = data_dir().display().to_string();
    let defaults: [(&str, &str); 8] = [
        ("--width", "narrow"),
        ("--dataset", "generated"),
        ("--device", "cpu"),
        ("--threads", "1"),
        ("--train-subset", "200"),
        ("--test-subset", "100"),
        ("--patience", "0"),
        ("--data-dir", &data),
    ];
    let mut args = Vec::new();
    for (k, v) in defaults {
        if !extra.contains(&k) {
            args.extend([k.to_string(), v.to_string()]);
        }
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// A process started through the launcher: it leads its own process group and dies
/// with this test binary; dropping it kills the group.
struct Proc {
    child: child_process::Child,
    out_path: PathBuf,
    err_path: PathBuf,
}

struct Finished {
    status: ExitStatus,
    stdout: String,
    stderr: String,
    /// Processes of its group were still alive when it ended (they were killed then).
    left_behind: bool,
}

impl Proc {
    fn start(mut cmd: Command, logs: &Path, name: &str) -> Proc {
        let out_path = logs.join(format!("{name}.out"));
        let err_path = logs.join(format!("{name}.err"));
        cmd.stdout(Stdio::from(std::fs::File::create(&out_path).unwrap()))
            .stderr(Stdio::from(std::fs::File::create(&err_path).unwrap()))
            .stdin(Stdio::null());
        let shown = format!("{cmd:?}");
        let child = child_process::spawn(cmd).unwrap_or_else(|e| panic!("start {shown}: {e}"));
        Proc { child, out_path, err_path }
    }

    fn stdout(&self) -> String {
        std::fs::read_to_string(&self.out_path).unwrap_or_default()
    }

    /// Waits for the process, failing the test (and killing the group) after `limit`.
    fn wait(mut self, limit: Duration, what: &str) -> Finished {
        let Some(status) = self.child.wait_timeout(limit).unwrap() else {
            let _ = self.child.kill();
            panic!(
                "{what} did not finish within {limit:?}\nstdout:\n{}\nstderr:\n{}",
                std::fs::read_to_string(&self.out_path).unwrap_or_default(),
                std::fs::read_to_string(&self.err_path).unwrap_or_default()
            );
        };
        Finished {
            status,
            stdout: std::fs::read_to_string(&self.out_path).unwrap_or_default(),
            stderr: std::fs::read_to_string(&self.err_path).unwrap_or_default(),
            left_behind: self.child.left_behind(),
        }
    }
}

/// Runs the lab to its end within 2 minutes, which must be a failure that leaves no
/// process of it behind.
fn run_to_failure(cmd: Command, logs: &Path, what: &str) -> Finished {
    let finished = Proc::start(cmd, logs, "lab").wait(Duration::from_secs(120), what);
    assert!(!finished.status.success(), "{what} succeeded:\n{}", finished.stdout);
    assert!(!finished.left_behind, "{what}: processes left behind");
    finished
}

fn pid_alive(pid: i32) -> bool {
    // A zombie still "exists" for kill(0); /proc says whether it was reaped or is one.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// The records of a run's trace so far (a line being written as it is read is left
/// for the next look).
fn trace_events(dir: &Path) -> Vec<Record> {
    Trace::read(dir).records
}

fn lab_command(step: u8, args: &[String], port: u16, trace: &Path) -> Command {
    let mut cmd = Command::new(bin(step));
    cmd.args(args)
        .env(lab_trace::TRACE_ENV, trace)
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .env_remove("LOCAL_RANK")
        .env_remove("RANK")
        .env_remove("WORLD_SIZE");
    cmd
}

/// The pid of the worker with `local_rank`, once its trace says it started training.
fn wait_for_training(trace: &Path, local_rank: usize, limit: Duration) -> i32 {
    let start = Instant::now();
    loop {
        let events = trace_events(trace);
        let pid = lab_trace::events::<event::Worker>(&events)
            .find(|(_, w)| w.worker_local_rank == local_rank)
            .map(|(record, _)| record.pid);
        if let Some(pid) = pid {
            if lab_trace::events::<event::TrainIndices>(&events).any(|(record, _)| record.pid == pid) {
                return pid as i32;
            }
        }
        assert!(start.elapsed() < limit, "local rank {local_rank} never started training: {events:#?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ------------------------------------------------------------------ bad input

/// Impossible options exit with 2 and a message naming the option, before any rank
/// starts and before anything touches the network (a listener on the rendezvous port
/// sees no connection).
#[test]
fn bad_options_exit_2_before_the_network() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let logs = scratch("bad-options");
    let cases: &[(&[&str], &str)] = &[
        (&["--num-gpus", "0"], "--num-gpus"),
        (&["--num-gpus=-2"], "--num-gpus"),
        (&["--num-gpus", "100000"], "--num-gpus"),
        (&["--num-nodes", "0"], "--num-nodes"),
        (&["--num-nodes", "2", "--node-id", "2"], "--node-id 2 is not a node of this job"),
        (&["--node-id", "1"], "--num-nodes 1 the nodes are 0 to 0"),
        (&["--node-id=-1"], "--node-id"),
        (&["--batch-size", "0"], "--batch-size"),
        (&["--epochs=-3"], "--epochs"),
        (&["--base-lr", "nan"], "--base-lr"),
        (&["--timeout", "0"], "--timeout"),
        (&["--save-every", "0"], "--save-every"),
    ];
    for (i, (bad, text)) in cases.iter().enumerate() {
        let args = lab_args(bad);
        let trace = logs.join(format!("trace-{i}"));
        let finished = Proc::start(lab_command(11, &args, port, &trace), &logs, &format!("case-{i}"))
            .wait(Duration::from_secs(60), &format!("{bad:?}"));
        eprintln!("{bad:?} -> {}: {}", finished.status, finished.stderr.trim());
        assert_eq!(finished.status.code(), Some(2), "{bad:?}: {}", finished.stderr);
        assert!(
            finished.stderr.contains(text),
            "{bad:?}: the message must contain {text:?}: {}",
            finished.stderr
        );
        assert!(!finished.stdout.contains("Worker started"), "{bad:?}: a rank started:\n{}", finished.stdout);
    }
    match listener.accept() {
        Err(e) if e.kind() == IoErrorKind::WouldBlock => {}
        other => panic!("something connected to the rendezvous port: {other:?}"),
    }
}

/// What a pipeline cannot run (step 13's `--pipeline`) exits with 2 and a message
/// naming it, before any rank starts and before the network.
#[test]
fn pipeline_refusals_exit_2_before_the_network() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let logs = scratch("pipeline-refusals");
    let cases: &[(&[&str], &str)] = &[
        (&["--pipeline"], "needs at least 2 ranks, but this job has 1"),
        (&["--pipeline", "--num-gpus", "11"], "the WideResNet has 10 layers"),
        (
            &["--pipeline", "--num-gpus", "2", "--micro-batches", "5"],
            "--micro-batches 5 cannot share --batch-size 32",
        ),
        (&["--pipeline", "--num-gpus", "2", "--sync-batch-norm"], "--sync-batch-norm with --pipeline"),
        (
            &["--pipeline", "--num-gpus", "2", "--save-every", "1"],
            "--save-every and --resume with --pipeline",
        ),
        (&["--pipeline", "--num-gpus", "2", "--resume"], "--save-every and --resume with --pipeline"),
        (&["--pipeline", "--num-gpus", "2", "--channels-last"], "--channels-last"),
        (&["--pipeline", "--num-gpus", "2", "--model", "mlp"], "--model mlp with --pipeline"),
        (&["--pipeline", "--num-gpus", "2", "--micro-batches", "0"], "--micro-batches"),
    ];
    for (i, (bad, text)) in cases.iter().enumerate() {
        let args = lab_args(bad);
        let trace = logs.join(format!("trace-{i}"));
        let finished = Proc::start(lab_command(13, &args, port, &trace), &logs, &format!("case-{i}"))
            .wait(Duration::from_secs(60), &format!("{bad:?}"));
        assert_eq!(finished.status.code(), Some(2), "{bad:?}: {}", finished.stderr);
        assert!(
            finished.stderr.contains(text),
            "{bad:?}: the message must contain {text:?}: {}",
            finished.stderr
        );
        assert!(!finished.stdout.contains("Worker started"), "{bad:?}: a rank started:\n{}", finished.stdout);
    }
    match listener.accept() {
        Err(e) if e.kind() == IoErrorKind::WouldBlock => {}
        other => panic!("something connected to the rendezvous port: {other:?}"),
    }
}

/// Another program on the rendezvous port: a clear error naming the port and the fix,
/// and no rank left behind.
#[test]
fn busy_rendezvous_port_is_a_clear_error() {
    let holder = TcpListener::bind("0.0.0.0:0").unwrap();
    let port = holder.local_addr().unwrap().port();
    let logs = scratch("busy-port");
    let args = lab_args(&["--num-gpus", "2", "--epochs", "1", "--timeout", "10"]);
    let cmd = lab_command(11, &args, port, &logs.join("trace"));
    let finished = run_to_failure(cmd, &logs, "the lab on a busy port");
    assert!(
        finished.stderr.contains(&format!("port {port} is taken")) && finished.stderr.contains("MASTER_PORT"),
        "{}",
        finished.stderr
    );
}

/// `MASTER_ADDR` naming a machine that is not rank 0's: rank 0 refuses to host the
/// store there (instead of listening everywhere), and the run ends, naming the address
/// with status 2, as for any bad input: the rank exits with 2 and `spawn` passes it on.
#[test]
fn a_master_addr_of_another_machine_is_refused() {
    let logs = scratch("foreign-addr");
    let args = lab_args(&["--num-gpus", "2", "--epochs", "1", "--timeout", "10"]);
    let mut cmd = lab_command(11, &args, child_process::free_port().unwrap(), &logs.join("trace"));
    cmd.env("MASTER_ADDR", "192.0.2.1"); // TEST-NET-1: nobody's address
    let finished = run_to_failure(cmd, &logs, "the lab with a foreign MASTER_ADDR");
    assert_eq!(finished.status.code(), Some(2), "{}", finished.stderr);
    assert!(
        finished.stderr.contains("192.0.2.1") && finished.stderr.contains("not an address of this machine"),
        "{}",
        finished.stderr
    );
}

// ------------------------------------------------------------------ faults

/// A rank SIGKILLed in the middle of an epoch: the run ends non-zero, well within the
/// lab's timeout, with a message naming the rank; every process is gone afterwards.
#[test]
fn a_rank_killed_mid_epoch_ends_the_run_and_leaves_nothing() {
    let logs = scratch("sigkill");
    let trace = logs.join("trace");
    let timeout = 20u64;
    let args = lab_args(&[
        "--num-gpus",
        "2",
        "--epochs",
        "40",
        "--train-subset",
        "1000",
        "--timeout",
        &timeout.to_string(),
    ]);
    let proc = Proc::start(lab_command(11, &args, child_process::free_port().unwrap(), &trace), &logs, "lab");
    let victim = wait_for_training(&trace, 1, Duration::from_secs(120));
    let survivor = wait_for_training(&trace, 0, Duration::from_secs(120));
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: a rank process this test started (its pid read from the trace).
    unsafe { libc::kill(victim, libc::SIGKILL) };
    let killed_at = Instant::now();
    let finished = proc.wait(Duration::from_secs(timeout + 60), "the lab after a rank was killed");
    eprintln!("after SIGKILL of local rank 1 ({victim}): {}\n{}", finished.status, finished.stderr);
    assert!(!finished.status.success(), "the run must fail");
    // Bounded by the lab's timeout (plus spawn's grace period), not a speed claim.
    assert!(killed_at.elapsed() < Duration::from_secs(timeout + 30), "took {:?}", killed_at.elapsed());
    assert!(
        finished.stderr.contains("local rank 1") && finished.stderr.contains("SIGKILL"),
        "the message must name the killed rank: {}",
        finished.stderr
    );
    assert!(!pid_alive(survivor), "local rank 0 ({survivor}) is still running");
    assert!(!finished.left_behind, "processes of the run are left behind");
}

/// Ranks started by a launcher (as torchrun starts them), one of them SIGKILLed mid
/// epoch: the survivor ends by itself, non-zero, naming the rank that went away. When
/// rank 0 goes, the rendezvous store (in its process) goes with it, which is how the
/// survivor knows.
fn launched_rank_killed(victim_rank: usize) {
    let logs = scratch(&format!("sigkill-launched-{victim_rank}"));
    let trace = logs.join("trace");
    let timeout = 15u64;
    let port = child_process::free_port().unwrap();
    let args = lab_args(&[
        "--num-gpus",
        "2",
        "--epochs",
        "40",
        "--train-subset",
        "1000",
        "--timeout",
        &timeout.to_string(),
    ]);
    let mut procs: Vec<Option<Proc>> = (0..2)
        .map(|r| {
            let mut cmd = lab_command(9, &args, port, &trace);
            cmd.env("LOCAL_RANK", r.to_string()).env("LOCAL_WORLD_SIZE", "2");
            Some(Proc::start(cmd, &logs, &format!("rank{r}")))
        })
        .collect();
    let survivor_rank = 1 - victim_rank;
    let victim = wait_for_training(&trace, victim_rank, Duration::from_secs(120));
    wait_for_training(&trace, survivor_rank, Duration::from_secs(120));
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: a rank process this test started.
    unsafe { libc::kill(victim, libc::SIGKILL) };
    let survivor = procs[survivor_rank].take().unwrap();
    let what = format!("rank {survivor_rank} after rank {victim_rank} was killed");
    let finished = survivor.wait(Duration::from_secs(timeout + 60), &what);
    eprintln!("{what}: {}\n{}", finished.status, finished.stderr);
    assert!(!finished.status.success(), "rank {survivor_rank} must fail");
    assert!(
        finished.stderr.contains(&format!("rank {victim_rank} failed, was killed or is stuck")),
        "the message must name rank {victim_rank}: {}",
        finished.stderr
    );
}

#[test]
fn a_launched_rank_killed_mid_epoch_ends_the_survivor() {
    launched_rank_killed(1);
}

#[test]
fn a_launched_rank_zero_killed_mid_epoch_ends_the_survivor() {
    launched_rank_killed(0);
}

/// A rank stuck before a collective: the others fail at their timeout with an error
/// naming the collective, and the run ends (the stuck rank is stopped too).
#[test]
fn a_stuck_rank_times_the_others_out_naming_the_collective() {
    let logs = scratch("stuck");
    let trace = logs.join("trace");
    let timeout = 5u64;
    let args = lab_args(&["--num-gpus", "2", "--epochs", "2", "--timeout", &timeout.to_string()]);
    let mut cmd = lab_command(11, &args, child_process::free_port().unwrap(), &trace);
    cmd.env("DDP_LAB_STALL_RANK", "1");
    let proc = Proc::start(cmd, &logs, "lab");
    let finished = proc.wait(Duration::from_secs(120), "the lab with a stuck rank");
    eprintln!("{}\n{}", finished.status, finished.stderr);
    assert!(!finished.status.success());
    assert!(finished.stderr.contains("stuck on purpose"), "{}", finished.stderr);
    assert!(
        finished.stderr.contains("barrier on rank 0 of 2")
            && finished.stderr.contains(&format!("{timeout}s")),
        "rank 0's error must name the collective and the timeout: {}",
        finished.stderr
    );
    assert!(
        finished.stderr.contains("rank 1 failed, was killed or is stuck"),
        "the message must name the stuck rank: {}",
        finished.stderr
    );
    assert!(!finished.left_behind, "the stuck rank was left behind");
}

// ------------------------------------------------------------------ checkpoints

fn checkpoint_json(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("checkpoint.json")).unwrap()).unwrap()
}

fn last_digest(events: &[Record]) -> String {
    lab_trace::events::<event::Weights>(events)
        .last()
        .map(|(_, w)| w.digest.clone())
        .expect("a weights event")
}

/// Save every epoch, crash in the middle of a save (previous checkpoint intact), then
/// resume on every rank with the saved weights and the epoch count continued.
#[test]
fn checkpoints_survive_a_crash_mid_save_and_resume() {
    let logs = scratch("checkpoint");
    let ckpt = logs.join("ckpt");
    let ckpt_s = ckpt.display().to_string();
    let common = ["--num-gpus", "2", "--timeout", "30", "--checkpoint-dir", &ckpt_s, "--save-every", "1"];

    // 1. Two epochs, a checkpoint after each.
    let trace1 = logs.join("trace1");
    let args = lab_args(&[&common[..], &["--epochs", "2"]].concat());
    let first =
        Proc::start(lab_command(11, &args, child_process::free_port().unwrap(), &trace1), &logs, "first")
            .wait(Duration::from_secs(300), "the first run");
    assert!(first.status.success(), "{}\n{}", first.stdout, first.stderr);
    let saved = checkpoint_json(&ckpt);
    assert_eq!(saved["format"], "ddp-lab-checkpoint/1");
    assert_eq!(saved["epoch"], 1);
    assert_eq!(saved["optimizer"]["learning_rate"], 0.01);
    assert_eq!(saved["early_stopping"]["accuracy_history"].as_array().unwrap().len(), 2);
    let weights = saved["weights"].as_str().unwrap().to_string();
    assert!(weights.ends_with(".safetensors"));
    let events1 = trace_events(&trace1);
    let digest_after_1 = last_digest(&events1);

    // 2. Resume, and crash while saving epoch 2's checkpoint (before its commit).
    let trace2 = logs.join("trace2");
    let args = lab_args(&[&common[..], &["--epochs", "4", "--resume"]].concat());
    let mut cmd = lab_command(11, &args, child_process::free_port().unwrap(), &trace2);
    cmd.env("DDP_LAB_CRASH_IN_SAVE", "2");
    let crashed = Proc::start(cmd, &logs, "crashed").wait(Duration::from_secs(300), "the crashing run");
    assert!(!crashed.status.success(), "{}", crashed.stderr);
    assert!(crashed.stderr.contains("crashing while saving epoch 2"), "{}", crashed.stderr);
    assert!(crashed.stdout.contains("resume: continuing at epoch 2"), "{}", crashed.stdout);
    let after_crash = checkpoint_json(&ckpt);
    assert_eq!(after_crash, saved, "the previous checkpoint must be intact");
    assert!(ckpt.join(&weights).is_file(), "the previous weights file must still exist");

    // 3. Resume again: every rank loads epoch 1's weights and continues at epoch 2.
    let trace3 = logs.join("trace3");
    let args = lab_args(&[&common[..], &["--epochs", "3", "--resume"]].concat());
    let resumed =
        Proc::start(lab_command(11, &args, child_process::free_port().unwrap(), &trace3), &logs, "resumed")
            .wait(Duration::from_secs(300), "the resumed run");
    assert!(resumed.status.success(), "{}\n{}", resumed.stdout, resumed.stderr);
    assert!(resumed.stdout.contains("resume: continuing at epoch 2"), "{}", resumed.stdout);
    let epochs: Vec<&str> = resumed.stdout.lines().filter(|l| l.starts_with("Epoch = ")).collect();
    assert_eq!(epochs.len(), 1, "{}", resumed.stdout);
    assert!(epochs[0].starts_with("Epoch =  2:"), "{}", epochs[0]);
    let events3 = trace_events(&trace3);
    let loaded: Vec<&event::Resumed> = events3.iter().filter_map(Record::get).collect();
    assert_eq!(loaded.len(), 2, "both ranks resume");
    for e in loaded {
        assert_eq!(e.digest, digest_after_1, "loaded weights differ from the saved");
    }
    assert_eq!(checkpoint_json(&ckpt)["epoch"], 2);
    // Only the committed weights file remains.
    let files: Vec<String> = std::fs::read_dir(&ckpt)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with("weights-"))
        .collect();
    assert_eq!(files, vec!["weights-epoch-0002.safetensors".to_string()]);

    // 4. A damaged weights file is refused with the file named and the fix (exit 2).
    let w = ckpt.join("weights-epoch-0002.safetensors");
    let bytes = std::fs::read(&w).unwrap();
    std::fs::write(&w, &bytes[..bytes.len() / 2]).unwrap();
    let args = lab_args(&[&common[..], &["--epochs", "4", "--resume"]].concat());
    let refused = Proc::start(
        lab_command(11, &args, child_process::free_port().unwrap(), &logs.join("trace4")),
        &logs,
        "refused",
    )
    .wait(Duration::from_secs(300), "the run on a damaged checkpoint");
    assert!(!refused.status.success());
    assert!(
        refused.stderr.contains("weights-epoch-0002.safetensors") && refused.stderr.contains("--resume"),
        "{}",
        refused.stderr
    );
}

/// Step 12's program with `--momentum`: checkpointing every epoch (each rank reloading
/// what rank 0 saved, buffers and all) changes nothing, a run stopped after epoch 0 and
/// resumed ends with the uninterrupted run's weights, bit for bit, and resuming with
/// another momentum is refused. Were the buffers lost on a reload, the checkpointing
/// runs would go elsewhere than the run without checkpoints. Dropout off (its draws are
/// not in a checkpoint) and 2 ranks (sums of two gradients, in any order), as the
/// checker's resume runs.
#[test]
fn a_run_resumed_with_momentum_equals_the_uninterrupted_run() {
    let logs = scratch("momentum");
    let run = |name: &str, extra: &[&str]| {
        let args = lab_args(&[&["--num-gpus", "2", "--timeout", "30"][..], extra].concat());
        let mut cmd = lab_command(12, &args, child_process::free_port().unwrap(), &logs.join(name));
        cmd.env("DDP_LAB_EQUIVALENCE", "1");
        let finished = Proc::start(cmd, &logs, name).wait(Duration::from_secs(300), name);
        assert_eq!(
            finished.status.code(),
            Some(if name == "refused" { 2 } else { 0 }),
            "{name}: {}\n{}",
            finished.stdout,
            finished.stderr
        );
        finished
    };
    let (whole_dir, resumed_dir) = (logs.join("ckpt-uninterrupted"), logs.join("ckpt-resumed"));
    let (whole_s, resumed_s) = (whole_dir.display().to_string(), resumed_dir.display().to_string());
    run("plain", &["--momentum", "0.9", "--epochs", "2"]);
    run(
        "uninterrupted",
        &["--momentum", "0.9", "--epochs", "2", "--save-every", "1", "--checkpoint-dir", &whole_s],
    );
    run(
        "stopped",
        &["--momentum", "0.9", "--epochs", "1", "--save-every", "1", "--checkpoint-dir", &resumed_s],
    );
    let saved = checkpoint_json(&resumed_dir);
    assert_eq!(
        (saved["format"].as_str(), saved["optimizer"]["momentum"].as_f64()),
        (Some("ddp-lab-checkpoint/2"), Some(0.9))
    );
    let resumed = run(
        "resumed",
        &[
            "--momentum",
            "0.9",
            "--epochs",
            "2",
            "--save-every",
            "1",
            "--checkpoint-dir",
            &resumed_s,
            "--resume",
        ],
    );
    assert!(resumed.stdout.contains("resume: continuing at epoch 1"), "{}", resumed.stdout);

    let digest = |name: &str| last_digest(&trace_events(&logs.join(name)));
    assert_eq!(digest("uninterrupted"), digest("plain"), "saving and reloading every epoch changed the run");
    assert_eq!(
        digest("resumed"),
        digest("uninterrupted"),
        "the resumed run differs from the uninterrupted one"
    );
    assert_eq!(
        checkpoint_json(&resumed_dir)["weights_md5"],
        checkpoint_json(&whole_dir)["weights_md5"],
        "weights and buffers saved after epoch 1"
    );

    let refused = run(
        "refused",
        &[
            "--momentum",
            "0.5",
            "--epochs",
            "2",
            "--save-every",
            "1",
            "--checkpoint-dir",
            &resumed_s,
            "--resume",
        ],
    );
    assert!(refused.stderr.contains("--momentum 0.9"), "{}", refused.stderr);
}

/// The venv's torchrun, when setup installed it.
fn torchrun() -> Option<PathBuf> {
    let torch = root().join(".libtorch").canonicalize().ok()?;
    // .libtorch -> VENV/lib/pythonX.Y/site-packages/torch
    let venv = torch.parent()?.parent()?.parent()?.parent()?;
    let path = venv.join("bin/torchrun");
    path.is_file().then_some(path)
}

/// torchrun's snapshot pattern: rank 1 dies once in epoch 2; torchrun (--max-restarts 1)
/// restarts both ranks, which resume from the last checkpoint and finish.
#[test]
fn torchrun_restart_recovers_from_the_last_checkpoint() {
    let Some(torchrun) = torchrun() else {
        println!("SKIPPED: torchrun_restart_recovers_from_the_last_checkpoint: no torchrun in the venv (run scripts/setup.sh)");
        return;
    };
    let logs = scratch("torchrun");
    let ckpt = logs.join("ckpt");
    let marker = logs.join("failed-once");
    let mut args = vec![
        "--no-python".to_string(),
        "--nproc-per-node".into(),
        "2".into(),
        "--max-restarts".into(),
        "1".into(),
        "--master-addr".into(),
        "127.0.0.1".into(),
        "--master-port".into(),
        child_process::free_port().unwrap().to_string(),
        bin(9).display().to_string(),
    ];
    args.extend(lab_args(&[
        "--num-gpus",
        "2",
        "--epochs",
        "3",
        "--timeout",
        "30",
        "--save-every",
        "1",
        "--resume",
        "--checkpoint-dir",
        &ckpt.display().to_string(),
    ]));
    let mut cmd = Command::new(torchrun);
    cmd.args(&args)
        .env("DDP_LAB_TRACE", logs.join("trace"))
        .env("DDP_LAB_FAIL_RANK", "1")
        .env("DDP_LAB_FAIL_AT_EPOCH", "2")
        .env("DDP_LAB_FAIL_ONCE", &marker)
        .env("OMP_NUM_THREADS", "1")
        .env_remove("LOCAL_RANK");
    let finished = Proc::start(cmd, &logs, "torchrun").wait(Duration::from_secs(400), "torchrun");
    eprintln!("torchrun: {}\n{}\n{}", finished.status, finished.stdout, finished.stderr);
    assert!(finished.status.success(), "the restarted run must succeed:\n{}", finished.stderr);
    assert!(marker.exists(), "rank 1 never failed: the test tested nothing");
    assert!(finished.stderr.contains("failed on purpose"), "{}", finished.stderr);
    let resumed = regex::Regex::new(r"resume: continuing at epoch (\d+)").unwrap();
    let at: usize = resumed
        .captures(&finished.stdout)
        .unwrap_or_else(|| panic!("the restart did not resume from a checkpoint:\n{}", finished.stdout))[1]
        .parse()
        .unwrap();
    // Rank 0 saved epoch 0 before rank 1 could reach epoch 2; epoch 1's save may race the kill.
    assert!(at == 1 || at == 2, "resumed at epoch {at}");
    let last = finished.stdout.lines().rfind(|l| l.starts_with("Epoch = ")).unwrap();
    assert!(last.starts_with("Epoch =  2:"), "{}", finished.stdout);
    assert_eq!(checkpoint_json(&ckpt)["epoch"], 2);
}

// ------------------------------------------------------------------ two nodes

/// Two network namespaces joined by a veth pair; removed on drop, whatever happens.
struct Namespaces {
    names: [String; 2],
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("cannot run `ip`: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("`ip {}` failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

impl Namespaces {
    fn create() -> Result<Namespaces, String> {
        let id = std::process::id() % 100_000;
        let ns = Namespaces { names: [format!("ddplab{id}a"), format!("ddplab{id}b")] };
        let [a, b] = &ns.names;
        let (va, vb) = (format!("vd{id}a"), format!("vd{id}b"));
        ip(&["netns", "add", a])?;
        ip(&["netns", "add", b])?;
        ip(&["link", "add", &va, "type", "veth", "peer", "name", &vb])?;
        ip(&["link", "set", &va, "netns", a])?;
        ip(&["link", "set", &vb, "netns", b])?;
        for (n, v, addr) in [(a, &va, "10.77.0.1/24"), (b, &vb, "10.77.0.2/24")] {
            ip(&["-n", n, "addr", "add", addr, "dev", v])?;
            ip(&["-n", n, "link", "set", v, "up"])?;
            ip(&["-n", n, "link", "set", "lo", "up"])?;
        }
        Ok(ns)
    }

    fn interface(&self, node: usize) -> String {
        format!("vd{}{}", std::process::id() % 100_000, ["a", "b"][node])
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        // Deleting a namespace also deletes its end of the veth pair, and so the pair.
        for n in &self.names {
            let _ = ip(&["netns", "del", n]);
        }
    }
}

/// The listening TCP sockets on `port` inside namespace `ns`, as /proc shows them.
fn listening_in(ns: &str, port: u16) -> Vec<String> {
    let out = Command::new("ip").args(["netns", "exec", ns, "cat", "/proc/net/tcp"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(1)
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            let (addr, p) = cols.get(1)?.split_once(':')?;
            (cols.get(3) == Some(&"0A") && u16::from_str_radix(p, 16).ok()? == port).then(|| addr.to_string())
        })
        .collect()
}

/// Node 0 and node 1, two ranks each, in two network namespaces: real TCP between
/// 10.77.0.1 and 10.77.0.2 (Gloo). The store listens on node 0's address only; the
/// two nodes share the data directory; every rank ends with the same weights.
#[test]
fn two_nodes_over_real_tcp_in_network_namespaces() {
    let ns = match Namespaces::create() {
        Ok(ns) => ns,
        Err(why) => {
            println!("SKIPPED: two_nodes_over_real_tcp_in_network_namespaces: network namespaces are not available here ({why})");
            return;
        }
    };
    let logs = scratch("two-nodes");
    let trace = logs.join("trace");
    let data = logs.join("data"); // fresh and shared by both nodes
    let port = child_process::free_port().unwrap();
    let nodes: Vec<Proc> = (0..2)
        .map(|node| {
            let data = data.display().to_string();
            let args = lab_args(&[
                "--data-dir",
                &data,
                "--num-nodes",
                "2",
                "--node-id",
                &node.to_string(),
                "--num-gpus",
                "2",
                "--epochs",
                "2",
                "--timeout",
                "60",
            ]);
            let mut cmd = Command::new("ip");
            cmd.args(["netns", "exec", &ns.names[node]])
                .arg(bin(11))
                .args(&args)
                .env("DDP_LAB_TRACE", &trace)
                .env("MASTER_ADDR", "10.77.0.1")
                .env("MASTER_PORT", port.to_string())
                .env("GLOO_SOCKET_IFNAME", ns.interface(node))
                .env_remove("LOCAL_RANK");
            let proc = Proc::start(cmd, &logs, &format!("node{node}"));
            if node == 0 {
                // Before node 1 starts: rank 0's store listens on 10.77.0.1 only.
                let start = Instant::now();
                let mut addrs = Vec::new();
                while addrs.is_empty() && start.elapsed() < Duration::from_secs(60) {
                    std::thread::sleep(Duration::from_millis(100));
                    addrs = listening_in(&ns.names[0], port);
                }
                assert_eq!(
                    addrs,
                    vec!["01004D0A".to_string()],
                    "the store must listen on 10.77.0.1 only:\n{}",
                    proc.stdout()
                );
            }
            proc
        })
        .collect();
    let mut outputs = Vec::new();
    for (node, proc) in nodes.into_iter().enumerate() {
        let finished = proc.wait(Duration::from_secs(400), &format!("node {node}"));
        assert!(
            finished.status.success(),
            "node {node}: {}\n{}\n{}",
            finished.status,
            finished.stdout,
            finished.stderr
        );
        outputs.push(finished.stdout);
    }
    assert!(outputs[0].contains("Quick evaluation: 4 ranks"), "{}", outputs[0]);
    let events = trace_events(&trace);
    let mut ranks = std::collections::BTreeMap::new();
    for (record, w) in lab_trace::events::<event::Weights>(&events) {
        ranks.insert(record.rank.unwrap(), w.digest.clone());
    }
    assert_eq!(ranks.len(), 4, "four ranks trained: {ranks:?}");
    let digests: std::collections::BTreeSet<&String> = ranks.values().collect();
    assert_eq!(digests.len(), 1, "weights differ between ranks: {ranks:?}");
    // Shared filesystem: prepared once per node, concurrently, and intact.
    let prepared = lab_trace::events::<event::DatasetReady>(&events).count();
    assert_eq!(prepared, 2, "each node's local rank 0 prepares the data");
    drop(ns);
}
