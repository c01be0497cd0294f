//! `dist::spawn` with real processes, and torchrun's environment.
//!
//! The process that calls `spawn` must be one whose re-execution lands back in the
//! same code, so each test starts this test binary again on the `#[ignore]`d
//! `spawn_entry` (the "parent"); its `spawn` re-executes it with the same arguments
//! (the "children", which reach `spawn_entry` too and run the worker). Children
//! report through files in a per-test directory; the test checks the processes
//! themselves through /proc.
mod common;

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use dist::{ErrorKind, LaunchEnv, ReduceOp, SpawnOptions};
use tch::Tensor;
use tch_distributed as dist;

const ENTRY: &str = "spawn_entry";
const SCENARIO: &str = "TCHD_SPAWN_TEST_SCENARIO";
const DIR: &str = "TCHD_SPAWN_TEST_DIR";
const NPROCS: &str = "TCHD_SPAWN_TEST_NPROCS";
const GRACE_MS: &str = "TCHD_SPAWN_TEST_GRACE_MS";
/// Generous bound for "the parent noticed and cleaned up": liveness, not speed.
const LIVENESS: Duration = Duration::from_secs(20);

/// The parent role, and (through spawn's re-execution) every child's.
#[test]
#[ignore = "entry point of the spawn tests' processes: the tests start it themselves"]
fn spawn_entry() {
    let scenario = std::env::var(SCENARIO).expect("started by the spawn tests, which set the scenario");
    let dir = PathBuf::from(std::env::var(DIR).unwrap());
    let nprocs: usize = std::env::var(NPROCS).unwrap().parse().unwrap();
    let mut options = SpawnOptions::new(nprocs).env("TCHD_SPAWN_TEST_FROM_PARENT", "hello");
    if let Ok(ms) = std::env::var(GRACE_MS) {
        options = options.grace_period(Duration::from_millis(ms.parse().unwrap()));
    }
    let started = Instant::now();
    let result = options.spawn(|local_rank| worker(&scenario, &dir, nprocs, local_rank));
    // Only the parent gets here: children exit inside spawn.
    let elapsed_ms = started.elapsed().as_millis();
    match result {
        Ok(()) => println!("SPAWN_OK elapsed_ms={elapsed_ms}"),
        Err(e) => println!("SPAWN_ERR kind={:?} elapsed_ms={elapsed_ms} message={e}", e.kind()),
    }
}

/// What every child does: record itself, then play its part of the scenario.
fn worker(scenario: &str, dir: &Path, nprocs: usize, local_rank: usize) -> Result<(), String> {
    let me = dist::spawned_rank().ok_or("a worker must see itself as a spawned rank")?;
    if me != (dist::SpawnedRank { local_rank, nprocs }) {
        return Err(format!("spawned_rank() = {me:?} for local rank {local_rank} of {nprocs}"));
    }
    if std::env::var("TCHD_SPAWN_TEST_FROM_PARENT").as_deref() != Ok("hello") {
        return Err("SpawnOptions::env did not reach the child".into());
    }
    if scenario == "fail" && local_rank == 2 {
        // This rank only yields to SIGKILL: the parent's escalation is under test.
        unsafe { libc::signal(libc::SIGTERM, libc::SIG_IGN) };
    }
    // `create_new`: a second run of the same rank would fail here.
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(dir.join(format!("ran-{local_rank}")))
        .map_err(|e| format!("rank {local_rank} ran twice? {e}"))?;
    write_atomically(&dir.join(format!("pid-{local_rank}")), &std::process::id().to_string());
    match scenario {
        "ok" => {
            // A worker calling spawn again must not start ranks of its own.
            let nested = dist::spawn(2, |_| ());
            let kind = nested.map(|()| "Ok".to_string()).unwrap_or_else(|e| format!("{:?}", e.kind()));
            write_atomically(&dir.join(format!("nested-{local_rank}")), &kind);
            Ok(())
        }
        "fail" if local_rank == 1 => {
            // Fail only once the test has seen every rank's process.
            wait_for_files(dir, "go", 1, Duration::from_secs(15));
            std::process::exit(3);
        }
        "fail" | "sleep" => {
            std::thread::sleep(Duration::from_secs(60));
            Err("slept a whole minute: nobody stopped this rank".into())
        }
        "error" => Err("disk full".into()),
        other => Err(format!("unknown scenario {other}")),
    }
}

fn write_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, text).unwrap();
    fs::rename(&tmp, path).unwrap();
}

/// Files named `{prefix}{i}` in `dir`, as a set of `i`.
fn indexed_files(dir: &Path, prefix: &str) -> BTreeSet<usize> {
    fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_prefix(prefix)?.parse().ok())
        .collect()
}

/// Waits until `n` files `{prefix}{i}` exist (`n == 1` with a plain name: that file).
fn wait_for_files(dir: &Path, prefix: &str, n: usize, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        let found = if n == 1 && dir.join(prefix).exists() { 1 } else { indexed_files(dir, prefix).len() };
        if found >= n {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// A scratch directory per test, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("tchd-spawn-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// The parent process of one scenario. Its output goes to files, never pipes: a child
/// that outlived it would otherwise hold the pipe open and hang the test.
struct Parent {
    child: Child,
    dir: PathBuf,
    started: Instant,
}

impl Parent {
    fn start(
        scenario: &str,
        nprocs: usize,
        dir: &Path,
        extra_env: &[(&str, &str)],
        own_group: bool,
    ) -> Parent {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([ENTRY, "--exact", "--ignored", "--nocapture", "--test-threads=1"])
            .env(SCENARIO, scenario)
            .env(DIR, dir)
            .env(NPROCS, nprocs.to_string())
            .stdin(Stdio::null())
            .stdout(fs::File::create(dir.join("parent.out")).unwrap())
            .stderr(fs::File::create(dir.join("parent.err")).unwrap());
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        // The test runner may have been started with SIGINT ignored (a background job of
        // a script); an interactive parent would have it at its default.
        unsafe {
            cmd.pre_exec(|| {
                libc::signal(libc::SIGINT, libc::SIG_DFL);
                Ok(())
            });
        }
        if own_group {
            // Like a shell job: the parent leads a process group that a terminal's
            // Ctrl-C would signal as a whole.
            cmd.process_group(0);
        }
        Parent { child: cmd.spawn().unwrap(), dir: dir.to_path_buf(), started: Instant::now() }
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Waits for the parent (killing it after `limit`) and returns its status and its
    /// output (stdout then stderr).
    fn wait(mut self, limit: Duration) -> (ExitStatus, String, Duration) {
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if self.started.elapsed() > limit {
                let _ = self.child.kill();
                break self.child.wait().unwrap();
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let elapsed = self.started.elapsed();
        let out = fs::read_to_string(self.dir.join("parent.out")).unwrap_or_default()
            + &fs::read_to_string(self.dir.join("parent.err")).unwrap_or_default();
        (status, out, elapsed)
    }
}

/// A process seen through /proc: its pid and start time, so that a recycled pid is
/// not mistaken for it.
#[derive(Debug, Clone, Copy)]
struct Proc {
    pid: u32,
    start_ticks: u64,
}

/// State letter and start time from /proc/<pid>/stat.
fn proc_stat(pid: u32) -> Option<(char, u64)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses; the fields after it do not.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some((fields[0].chars().next()?, fields[19].parse().ok()?))
}

impl Proc {
    fn from_pid_file(dir: &Path, rank: usize) -> Proc {
        let pid: u32 = fs::read_to_string(dir.join(format!("pid-{rank}"))).unwrap().parse().unwrap();
        let (_, start_ticks) =
            proc_stat(pid).unwrap_or_else(|| panic!("rank {rank} (pid {pid}) is gone already"));
        Proc { pid, start_ticks }
    }

    /// Running (or stopped), as opposed to gone or a zombie waiting to be reaped.
    fn alive(&self) -> bool {
        matches!(proc_stat(self.pid), Some((state, start)) if start == self.start_ticks && state != 'Z' && state != 'X')
    }
}

/// The children's pids, once all `n` have reported.
fn children(dir: &Path, n: usize) -> Vec<Proc> {
    assert!(
        wait_for_files(dir, "pid-", n, LIVENESS),
        "not all {n} ranks started: {:?}",
        indexed_files(dir, "pid-")
    );
    (0..n).map(|rank| Proc::from_pid_file(dir, rank)).collect()
}

fn assert_all_gone(procs: &[Proc], within: Duration) {
    let start = Instant::now();
    while procs.iter().any(Proc::alive) && start.elapsed() < within {
        std::thread::sleep(Duration::from_millis(20));
    }
    let alive: Vec<_> = procs.iter().filter(|p| p.alive()).collect();
    assert!(alive.is_empty(), "still alive after {within:?}: {alive:?}");
}

fn field<'a>(output: &'a str, key: &str) -> Option<&'a str> {
    output.split_whitespace().find_map(|w| w.strip_prefix(key))
}

/// The parent's one result line.
fn result_line(output: &str) -> &str {
    // The test harness prints `test spawn_entry ... ` without a newline before it.
    let lines: Vec<&str> = output.lines().filter_map(|l| l.find("SPAWN_").map(|i| &l[i..])).collect();
    assert_eq!(lines.len(), 1, "exactly the parent must report (children exit inside spawn):\n{output}");
    eprintln!("parent: {}", lines[0]);
    lines[0]
}

/// Also: a spawn inside a worker is refused instead of multiplying the ranks.
#[test]
fn every_rank_runs_its_worker_once_and_the_parent_alone_continues() {
    let scratch = Scratch::new("ok");
    let (status, out, _) = Parent::start("ok", 3, &scratch.0, &[], false).wait(LIVENESS * 2);
    assert!(status.success(), "{status}:\n{out}");
    assert!(result_line(&out).starts_with("SPAWN_OK"), "{out}");
    assert_eq!(indexed_files(&scratch.0, "ran-"), BTreeSet::from([0, 1, 2]), "{out}");
    // Three distinct processes, none of them the parent.
    let pids: BTreeSet<String> =
        (0..3).map(|r| fs::read_to_string(scratch.0.join(format!("pid-{r}"))).unwrap()).collect();
    assert_eq!(pids.len(), 3, "{pids:?}");
    for r in 0..3 {
        let nested = fs::read_to_string(scratch.0.join(format!("nested-{r}"))).unwrap();
        assert_eq!(nested, "InvalidArgument", "rank {r}'s nested spawn");
    }
}

#[test]
fn a_failing_rank_stops_the_others_and_is_named() {
    let scratch = Scratch::new("fail");
    let parent = Parent::start("fail", 3, &scratch.0, &[(GRACE_MS, "1000")], false);
    let procs = children(&scratch.0, 3);
    fs::write(scratch.0.join("go"), "").unwrap();
    let (status, out, elapsed) = parent.wait(LIVENESS * 2);
    assert!(status.success(), "{status}:\n{out}");
    let line = result_line(&out);
    assert_eq!(field(line, "kind="), Some("RankFailed"), "{out}");
    assert!(line.contains("local rank 1 "), "{out}");
    assert!(line.contains("exited with code 3"), "{out}");
    assert!(line.contains("stopped the 2 ranks still running"), "{out}");
    assert!(elapsed < LIVENESS, "the parent took {elapsed:?}:\n{out}");
    // The parent has reaped every child before returning: not even zombies remain.
    assert_all_gone(&procs, Duration::ZERO);
}

#[test]
fn a_worker_error_is_printed_with_its_rank() {
    let scratch = Scratch::new("error");
    let (status, out, _) = Parent::start("error", 1, &scratch.0, &[], false).wait(LIVENESS * 2);
    assert!(status.success(), "{status}:\n{out}");
    let line = result_line(&out);
    assert_eq!(field(line, "kind="), Some("RankFailed"), "{out}");
    assert!(line.contains("local rank 0 ") && line.contains("exited with code 1"), "{out}");
    assert!(out.lines().any(|l| l == "local rank 0: disk full"), "{out}");
}

#[test]
fn sigkill_to_the_parent_leaves_no_orphans() {
    let scratch = Scratch::new("sigkill");
    let parent = Parent::start("sleep", 2, &scratch.0, &[], false);
    let procs = children(&scratch.0, 2);
    unsafe { libc::kill(parent.pid(), libc::SIGKILL) };
    let (status, out, _) = parent.wait(LIVENESS);
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGKILL), "{out}");
    // Nobody reaps the orphans but init: a zombie counts as gone.
    assert_all_gone(&procs, LIVENESS);
}

#[test]
fn sigint_to_the_parent_stops_every_rank() {
    let scratch = Scratch::new("sigint");
    let parent = Parent::start("sleep", 2, &scratch.0, &[], false);
    let procs = children(&scratch.0, 2);
    unsafe { libc::kill(parent.pid(), libc::SIGINT) };
    let (status, out, elapsed) = parent.wait(LIVENESS * 2);
    assert!(status.success(), "{status}:\n{out}");
    let line = result_line(&out);
    assert_eq!(field(line, "kind="), Some("Interrupted"), "{out}");
    assert!(line.contains("interrupted by SIGINT"), "{out}");
    assert!(elapsed < LIVENESS, "the parent took {elapsed:?}:\n{out}");
    assert_all_gone(&procs, Duration::ZERO);
}

/// What a terminal's Ctrl-C does: SIGINT to the whole foreground process group.
#[test]
fn ctrl_c_in_a_terminal_stops_everything_and_the_parent_reports_it() {
    let scratch = Scratch::new("ctrlc");
    let parent = Parent::start("sleep", 2, &scratch.0, &[], true);
    let procs = children(&scratch.0, 2);
    unsafe { libc::kill(-parent.pid(), libc::SIGINT) };
    let (status, out, elapsed) = parent.wait(LIVENESS * 2);
    assert!(status.success(), "{status}:\n{out}");
    assert_eq!(field(result_line(&out), "kind="), Some("Interrupted"), "{out}");
    assert!(elapsed < LIVENESS, "the parent took {elapsed:?}:\n{out}");
    assert_all_gone(&procs, Duration::ZERO);
}

#[test]
fn zero_processes_is_invalid() {
    let e = dist::spawn(0, |_| ()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    let e = SpawnOptions::new(0).spawn(|_| -> Result<(), String> { unreachable!() }).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(dist::spawned_rank().is_none());
}

// ---- torchrun's environment ------------------------------------------------------

const TORCHRUN_ENV: [(&str, &str); 14] = [
    ("RANK", "3"),
    ("LOCAL_RANK", "1"),
    ("WORLD_SIZE", "4"),
    ("LOCAL_WORLD_SIZE", "2"),
    ("GROUP_RANK", "1"),
    ("GROUP_WORLD_SIZE", "2"),
    ("ROLE_RANK", "3"),
    ("ROLE_WORLD_SIZE", "4"),
    ("MASTER_ADDR", "10.0.0.1"),
    ("MASTER_PORT", "29500"),
    ("TORCHELASTIC_RESTART_COUNT", "0"),
    ("TORCHELASTIC_MAX_RESTARTS", "0"),
    ("TORCHELASTIC_RUN_ID", "none"),
    ("TORCHELASTIC_USE_AGENT_STORE", "True"),
];

/// Variables to set (`Some`) or remove (`None`) on top of [`TORCHRUN_ENV`].
type EnvChanges<'a> = &'a [(&'a str, Option<&'a str>)];

fn parse_with(changes: EnvChanges) -> dist::Result<Option<LaunchEnv>> {
    let mut env: Vec<(String, String)> =
        TORCHRUN_ENV.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    for (name, value) in changes {
        env.retain(|(k, _)| k != name);
        if let Some(v) = value {
            env.push((name.to_string(), v.to_string()));
        }
    }
    LaunchEnv::from_lookup(|name| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
}

#[test]
fn torchrun_environment_is_read() {
    let launch = parse_with(&[]).unwrap().unwrap();
    assert_eq!(
        launch,
        LaunchEnv {
            rank: 3,
            local_rank: 1,
            world_size: 4,
            local_world_size: 2,
            master_addr: "10.0.0.1".into(),
            master_port: 29500,
            node_rank: Some(1),
            num_nodes: Some(2),
            restart_count: Some(0),
            max_restarts: Some(0),
            run_id: Some("none".into()),
            agent_store: true,
        }
    );
    assert!(!launch.is_rank_zero());
    // The elastic extras are optional; a launcher may set only the core six.
    let core = parse_with(&[
        ("GROUP_RANK", None),
        ("GROUP_WORLD_SIZE", None),
        ("TORCHELASTIC_RESTART_COUNT", None),
        ("TORCHELASTIC_MAX_RESTARTS", None),
        ("TORCHELASTIC_RUN_ID", None),
        ("TORCHELASTIC_USE_AGENT_STORE", None),
    ])
    .unwrap()
    .unwrap();
    assert_eq!((core.node_rank, core.run_id, core.agent_store), (None, None, false));
}

#[test]
fn no_local_rank_means_not_launched_by_torchrun() {
    assert_eq!(parse_with(&[("LOCAL_RANK", None)]).unwrap(), None);
    assert_eq!(parse_with(&[("LOCAL_RANK", Some(" "))]).unwrap(), None);
    assert_eq!(LaunchEnv::from_lookup(|_| None).unwrap(), None);
}

#[test]
fn bad_torchrun_values_name_the_variable() {
    let cases: [(EnvChanges, &str); 12] = [
        (&[("LOCAL_RANK", Some("one"))], "LOCAL_RANK = \"one\""),
        (&[("RANK", Some("-1"))], "RANK = \"-1\""),
        (&[("RANK", None)], "RANK is not"),
        (&[("WORLD_SIZE", Some("0"))], "WORLD_SIZE = 0"),
        (&[("LOCAL_WORLD_SIZE", Some("x"))], "LOCAL_WORLD_SIZE = \"x\""),
        (&[("MASTER_ADDR", Some(""))], "MASTER_ADDR is not"),
        (&[("MASTER_PORT", Some("70000"))], "MASTER_PORT = \"70000\""),
        (&[("MASTER_PORT", Some("0"))], "MASTER_PORT = \"0\""),
        (&[("RANK", Some("4"))], "RANK = 4 is not below WORLD_SIZE = 4"),
        (&[("LOCAL_RANK", Some("2"))], "LOCAL_RANK = 2 is not below LOCAL_WORLD_SIZE = 2"),
        (&[("LOCAL_WORLD_SIZE", Some("8"))], "LOCAL_WORLD_SIZE = 8 is larger than WORLD_SIZE = 4"),
        (&[("GROUP_RANK", Some("2"))], "GROUP_RANK = 2 is not below GROUP_WORLD_SIZE = 2"),
    ];
    for (changes, text) in cases {
        let e = parse_with(changes).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{changes:?}: {e}");
        assert!(e.message().contains(text), "{changes:?}: {e:?} should contain {text:?}");
    }
}

/// `from_env` and `local_rank` read the real environment: checked in a child process
/// with a controlled environment, so no test races on this process's variables.
#[test]
#[ignore = "entry point of env_readers_see_the_process_environment"]
fn env_entry() {
    let launch = LaunchEnv::from_env().map(|l| l.map(|l| (l.rank, l.local_rank)));
    println!("ENV from_env={launch:?} local_rank={:?}", dist::local_rank().map_err(|e| e.to_string()));
}

#[test]
fn env_readers_see_the_process_environment() {
    let run = |env: &[(&str, &str)]| {
        let out = Command::new(std::env::current_exe().unwrap())
            .args(["env_entry", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
            .env_clear()
            .envs(std::env::vars().filter(|(k, _)| k == "LD_LIBRARY_PATH" || k == "PATH"))
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.lines()
            .find_map(|l| l.find("ENV ").map(|i| l[i..].to_string()))
            .unwrap_or_else(|| panic!("{text}"))
    };
    assert_eq!(run(&TORCHRUN_ENV), "ENV from_env=Ok(Some((3, 1))) local_rank=Ok(Some(1))");
    // LOCAL_RANK alone is enough for local_rank(), not for the full contract.
    let alone = run(&[("LOCAL_RANK", "0")]);
    assert!(alone.contains("local_rank=Ok(Some(0))") && alone.contains("from_env=Err"), "{alone}");
}

// ---- under torchrun ---------------------------------------------------------------

fn torchrun() -> Option<PathBuf> {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/torchrun");
    if venv.exists() {
        return Some(venv);
    }
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join("torchrun")).find(|p| p.exists())
}

/// A rank under torchrun: reads the launch environment, joins over env:// and
/// all-reduces.
#[test]
#[ignore = "entry point of runs_unchanged_under_torchrun"]
fn torchrun_entry() {
    let launch = LaunchEnv::from_env().unwrap().expect("started by torchrun");
    assert_eq!(dist::local_rank().unwrap(), Some(launch.local_rank));
    dist::init_process_group(
        dist::Backend::Gloo,
        dist::InitOptions { timeout: Duration::from_secs(60), ..Default::default() },
    )
    .unwrap();
    assert_eq!(dist::get_rank().unwrap(), launch.rank);
    assert_eq!(dist::get_world_size().unwrap(), launch.world_size);
    let mut t = Tensor::from_slice(&[launch.rank as f32 + 1.0]);
    dist::all_reduce(&mut t, ReduceOp::Sum).unwrap();
    println!(
        "TORCHRUN rank={} local_rank={} world={} agent_store={} sum={}",
        launch.rank,
        launch.local_rank,
        launch.world_size,
        launch.agent_store,
        t.double_value(&[0])
    );
    dist::destroy_process_group().unwrap();
}

#[test]
fn runs_unchanged_under_torchrun() {
    let Some(torchrun) = torchrun() else {
        assert!(
            !common::torch_required(),
            "no torchrun although DDP_LAB_REQUIRE_TORCH is set: run scripts/setup.sh"
        );
        eprintln!("SKIPPED runs_unchanged_under_torchrun: no torchrun (run scripts/setup.sh for .venv)");
        return;
    };
    let scratch = Scratch::new("torchrun");
    let port = child_process::free_port().unwrap().to_string();
    let mut child = Command::new(torchrun)
        .args(["--no-python", "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", &port])
        .arg(std::env::current_exe().unwrap())
        .args(["torchrun_entry", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env_remove("TCHD_SPAWN_PARENT_PID") // spawn's mark of a child it started
        .stdin(Stdio::null())
        .stdout(fs::File::create(scratch.0.join("out")).unwrap())
        .stderr(fs::File::create(scratch.0.join("err")).unwrap())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if started.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let text = fs::read_to_string(scratch.0.join("out")).unwrap()
        + &fs::read_to_string(scratch.0.join("err")).unwrap();
    assert!(status.success(), "torchrun: {status}\n{text}");
    let mut lines: Vec<&str> = text.lines().filter_map(|l| l.find("TORCHRUN ").map(|i| &l[i..])).collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "TORCHRUN rank=0 local_rank=0 world=2 agent_store=true sum=3",
            "TORCHRUN rank=1 local_rank=1 world=2 agent_store=true sum=3"
        ],
        "{text}"
    );
}
