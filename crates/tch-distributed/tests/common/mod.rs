//! Multi-process test harness: a test re-executes its own test binary once per rank,
//! running the `#[ignore]`d entry point `rank_entry` with the scenario in the
//! environment, and collects every rank's exit status and output.
#![allow(dead_code)]

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Name of the `#[ignore]`d test every rank process runs.
pub const ENTRY: &str = "rank_entry";

/// Printed by a rank whose scenario returned; without it a rank that ran no test at all
/// (a filter that matched nothing exits 0) would pass.
pub const COMPLETED: &str = "tchd-rank-scenario-completed";

/// Call at the end of `rank_entry`.
pub fn mark_completed() {
    println!("{COMPLETED}");
}

/// The body of every test file's `rank_entry`: runs the scenario named by the harness
/// (`TCHD_SCENARIO`), then prints [`COMPLETED`].
pub fn run_scenario(scenarios: &[(&str, fn())]) {
    let name =
        std::env::var("TCHD_SCENARIO").expect("run by the multi-process tests, which set TCHD_SCENARIO");
    let (_, scenario) =
        scenarios.iter().find(|(n, _)| *n == name).unwrap_or_else(|| panic!("unknown scenario {name}"));
    scenario();
    mark_completed();
}

/// Joins the default group over env:// (Gloo), as most scenarios start.
pub fn init_env(timeout: std::time::Duration) {
    tch_distributed::init_process_group(
        tch_distributed::Backend::Gloo,
        tch_distributed::InitOptions { timeout, ..Default::default() },
    )
    .expect("init_process_group(env://)");
}

/// Whether skipping for lack of the workspace's PyTorch is forbidden: scripts/test.sh
/// sets up the venv first and sets this, so a missing torch there is a failure.
pub fn torch_required() -> bool {
    std::env::var_os("DDP_LAB_REQUIRE_TORCH").is_some()
}

/// A port nobody listens on right now (the OS picks it; tests run in parallel).
#[derive(Debug)]
pub struct RankOutcome {
    pub rank: usize,
    /// Exited 0 *and* printed [`COMPLETED`].
    pub success: bool,
    pub code: Option<i32>,
    pub output: String,
    pub elapsed: Duration,
}

/// One rank process to start: its environment on top of the scenario's.
pub struct RankSpec {
    pub rank: usize,
    pub env: Vec<(String, String)>,
    /// Another program to run as this rank (e.g. a Python rank: the interpreter and
    /// its script); `None` runs the scenario in this test binary.
    pub program: Option<Vec<String>>,
}

/// The usual env:// rank set: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT.
pub fn env_ranks(ranks: impl IntoIterator<Item = usize>, world_size: usize, port: u16) -> Vec<RankSpec> {
    ranks
        .into_iter()
        .map(|rank| RankSpec {
            rank,
            env: vec![
                (tch_distributed::RANK_ENV.into(), rank.to_string()),
                (tch_distributed::WORLD_SIZE_ENV.into(), world_size.to_string()),
                (tch_distributed::MASTER_ADDR_ENV.into(), "127.0.0.1".into()),
                (tch_distributed::MASTER_PORT_ENV.into(), port.to_string()),
            ],
            program: None,
        })
        .collect()
}

/// Starts every rank running `scenario`, waits for all of them (killing the lot after
/// `deadline`, so a hang is a failure and never a stuck test), and returns outcomes
/// in rank order.
pub fn run_ranks(
    scenario: &str,
    ranks: Vec<RankSpec>,
    shared_env: &[(&str, &str)],
    deadline: Duration,
) -> Vec<RankOutcome> {
    let exe = std::env::current_exe().unwrap();
    let start = Instant::now();
    // Through the launcher: a rank never outlives this test binary.
    let mut children: Vec<(usize, child_process::Child)> = ranks
        .into_iter()
        .map(|spec| {
            let mut cmd = match &spec.program {
                Some(program) => {
                    let mut cmd = Command::new(&program[0]);
                    cmd.args(&program[1..]);
                    cmd
                }
                None => {
                    let mut cmd = Command::new(&exe);
                    cmd.args([ENTRY, "--exact", "--ignored", "--nocapture", "--test-threads=1"]);
                    cmd
                }
            };
            cmd.env_remove(tch_distributed::RANK_ENV)
                .env_remove(tch_distributed::WORLD_SIZE_ENV)
                .env_remove(tch_distributed::MASTER_ADDR_ENV)
                .env_remove(tch_distributed::MASTER_PORT_ENV)
                .env_remove("TORCHELASTIC_USE_AGENT_STORE")
                .env("TCHD_SCENARIO", scenario)
                .env("TCHD_TEST_RANK", spec.rank.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            for (k, v) in shared_env {
                cmd.env(k, v);
            }
            for (k, v) in &spec.env {
                cmd.env(k, v);
            }
            (spec.rank, child_process::spawn(cmd).expect("start a rank process"))
        })
        .collect();
    // Drain pipes on threads so a chatty rank never blocks on a full pipe.
    let readers: Vec<_> = children
        .iter_mut()
        .map(|(_, c)| {
            let mut out = c.stdout.take().unwrap();
            let mut err = c.stderr.take().unwrap();
            std::thread::spawn(move || {
                let mut s = String::new();
                let _ = out.read_to_string(&mut s);
                let mut e = String::new();
                let _ = err.read_to_string(&mut e);
                s + &e
            })
        })
        .collect();
    let mut finished: Vec<Option<(std::process::ExitStatus, Duration)>> = vec![None; children.len()];
    while finished.iter().any(|f| f.is_none()) {
        for (i, (_, child)) in children.iter_mut().enumerate() {
            if finished[i].is_none() {
                if let Some(status) = child.try_wait().unwrap() {
                    finished[i] = Some((status, start.elapsed()));
                }
            }
        }
        if start.elapsed() > deadline {
            for (i, (_, child)) in children.iter_mut().enumerate() {
                if finished[i].is_none() {
                    let status = child.kill().unwrap();
                    finished[i] = Some((status, start.elapsed()));
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    children
        .into_iter()
        .zip(readers)
        .zip(finished)
        .map(|(((rank, _), reader), f)| {
            let (status, elapsed) = f.unwrap();
            let output = reader.join().unwrap();
            let success = status.success() && output.contains(COMPLETED);
            RankOutcome { rank, success, code: status.code(), output, elapsed }
        })
        .collect()
}

/// Panics with every rank's output unless all succeeded.
/// Set `TCHD_SHOW_OUTPUT=1` to see every rank's output even when all succeed.
pub fn assert_all_ok(outcomes: &[RankOutcome]) {
    if std::env::var_os("TCHD_SHOW_OUTPUT").is_some() {
        for o in outcomes {
            eprintln!("--- rank {} (exit {:?}, {:?})\n{}", o.rank, o.code, o.elapsed, o.output);
        }
    }
    if outcomes.iter().all(|o| o.success) {
        return;
    }
    let mut report = String::new();
    for o in outcomes {
        report += &format!("--- rank {} (exit {:?}, {:?})\n{}\n", o.rank, o.code, o.elapsed, o.output);
    }
    panic!("not every rank succeeded:\n{report}");
}

/// Reads the scenario's rank inside a rank process.
pub fn test_rank() -> usize {
    std::env::var("TCHD_TEST_RANK").unwrap().parse().unwrap()
}

pub fn env_usize(name: &str) -> usize {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} not set")).parse().unwrap()
}

/// A Gloo group of one rank on a store of its own, bound to `device_id` if given: for
/// tests of one process's view of a group.
pub fn single_rank_group(device_id: Option<tch::Device>) -> tch_distributed::ProcessGroup {
    use tch_distributed::{Backend, GroupOptions, ProcessGroup, Store, TcpStoreOptions};
    let store = Store::tcp(&TcpStoreOptions {
        host: "127.0.0.1".into(),
        port: 0,
        is_server: true,
        world_size: Some(1),
        wait_for_workers: true,
        timeout: Duration::from_secs(30),
    })
    .expect("a one-rank store");
    let opts = GroupOptions {
        backend: Backend::Gloo,
        gloo_hostname: Some("127.0.0.1".into()),
        device_id,
        ..GroupOptions::default()
    };
    ProcessGroup::new(&store, 0, 1, &opts).expect("a one-rank Gloo group")
}
