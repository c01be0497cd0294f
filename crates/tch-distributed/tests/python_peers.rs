//! One job, two languages: Rust ranks (this test binary) and PyTorch ranks
//! (`tests/python/peer.py`, run by the workspace's `.venv/bin/python`) join one Gloo
//! group through env:// or tcp://, either side hosting the store, and run the same
//! collectives, reduce ops, subgroups, DDP's coalesced broadcast, FSDP's
//! `all_gather_into_tensor` and `reduce_scatter_tensor`, and a ring of `isend`/`irecv`. Every rank,
//! whatever its language, must print exactly the results worked out here. The Rust
//! ranks check no collective (`TCHD_CHECK_COLLECTIVES=0`), as PyTorch by default.
mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::*;
use dist::{Backend, Init, ReduceOp};
use tch::{Kind, Tensor};
use tch_distributed as dist;

const DEADLINE: Duration = Duration::from_secs(240);
const TIMEOUT: Duration = Duration::from_secs(60);

/// Entry point of every Rust rank process (started by the tests below, never by hand).
#[test]
#[ignore = "rank process entry point: the multi-process tests start it themselves"]
fn rank_entry() {
    run_scenario(&[("mixed", mixed_scenario), ("mesh", mesh_scenario)]);
}

fn show(name: &str, t: &Tensor) {
    let flat = t.flatten(0, -1);
    let text: Vec<String> = if flat.is_floating_point() {
        Vec::<f64>::try_from(flat.to_kind(Kind::Double)).unwrap().iter().map(|v| format!("{v:.4}")).collect()
    } else {
        Vec::<i64>::try_from(flat.to_kind(Kind::Int64)).unwrap().iter().map(i64::to_string).collect()
    };
    println!("result {name}: {}", text.join(" "));
}

/// Joins the job as `tests/python/peer.py` does (env:// or, with PEER_INIT=tcp, tcp://).
fn join() -> (usize, usize) {
    let rank = env_usize(dist::RANK_ENV);
    let n = env_usize(dist::WORLD_SIZE_ENV);
    let init = if std::env::var("PEER_INIT").as_deref() == Ok("tcp") {
        let host = std::env::var(dist::MASTER_ADDR_ENV).unwrap();
        Init::Tcp { host, port: env_usize(dist::MASTER_PORT_ENV) as u16 }
    } else {
        Init::Env
    };
    dist::init_process_group(
        Backend::Gloo,
        dist::InitOptions { init_method: init, world_size: Some(n), rank: Some(rank), timeout: TIMEOUT },
    )
    .expect("init_process_group");
    println!("rust rank {rank} of {n}");
    (rank, n)
}

/// The Rust side of `tests/python/peer.py`'s `mesh`, call for call.
fn mesh_scenario() {
    let (rank, n) = join();
    let mesh = dist::init_device_mesh(tch::Device::Cpu, &[n / 2, 2], &["dp", "tp"]).unwrap();
    let coordinate: Vec<i64> = mesh.get_coordinate().iter().map(|&c| c as i64).collect();
    show("mesh coordinate", &Tensor::from_slice(&coordinate));
    for name in ["tp", "dp"] {
        let mut t = Tensor::from_slice(&[rank as i64]);
        mesh.get_group(name).unwrap().all_reduce(&mut t, ReduceOp::Sum).unwrap();
        show(&format!("mesh {name} sum, local rank {}", mesh.get_local_rank(name).unwrap()), &t);
    }
    let tp = mesh.slice("tp").unwrap();
    let ranks: Vec<i64> = tp.ranks().iter().map(|&r| r as i64).collect();
    show("mesh tp slice", &Tensor::from_slice(&ranks));
    let world = dist::init_device_mesh(tch::Device::Cpu, &[n], &["world"]).unwrap();
    let mut t = Tensor::from_slice(&[rank as i64]);
    world.get_group("world").unwrap().all_reduce(&mut t, ReduceOp::Max).unwrap();
    show("mesh world max", &t);
    if let Some(ends) = dist::new_group(Some(&[0, n - 1]), None).unwrap() {
        let mut t = Tensor::from_slice(&[rank as i64]);
        ends.all_reduce(&mut t, ReduceOp::Sum).unwrap();
        show("new_group after the meshes", &t);
    }
    dist::destroy_process_group().unwrap();
}

/// What rank `rank` of `n` must print in `mesh`: TP groups are neighbours {2i, 2i+1},
/// DP groups every second rank from the rank's column.
fn expected_mesh_results(rank: usize, n: usize) -> Vec<String> {
    let (row, col, dp) = (rank / 2, rank % 2, n / 2);
    let tp_sum = 4 * row + 1;
    let dp_sum = dp * col + dp * (dp - 1);
    let mut lines = vec![
        format!("result mesh coordinate: {row} {col}"),
        format!("result mesh tp sum, local rank {col}: {tp_sum}"),
        format!("result mesh dp sum, local rank {row}: {dp_sum}"),
        format!("result mesh tp slice: {} {}", 2 * row, 2 * row + 1),
        format!("result mesh world max: {}", n - 1),
    ];
    if rank == 0 || rank == n - 1 {
        lines.push(format!("result new_group after the meshes: {}", n - 1));
    }
    lines
}

/// The Rust side of `tests/python/peer.py`'s collectives, call for call.
fn mixed_scenario() {
    let (rank, n) = join();
    let r = rank as i64;
    let f = rank as f64;

    let mut t = Tensor::from_slice(&[(f + 1.0) as f32, (0.5 * (f + 1.0)) as f32]);
    dist::all_reduce(&mut t, ReduceOp::Sum).unwrap();
    show("all_reduce sum f32", &t);
    let mut t = Tensor::from_slice(&[f + 2.0]);
    dist::all_reduce(&mut t, ReduceOp::Product).unwrap();
    show("all_reduce product f64", &t);
    let mut t = Tensor::from_slice(&[10 - r, r]);
    dist::all_reduce(&mut t, ReduceOp::Min).unwrap();
    show("all_reduce min i64", &t);
    let mut t = Tensor::from_slice(&[r as i32, -r as i32]);
    dist::all_reduce(&mut t, ReduceOp::Max).unwrap();
    show("all_reduce max i32", &t);

    let mut t = Tensor::from_slice(&[r * 100 + 7, r]);
    dist::broadcast(&mut t, 1).unwrap();
    show("broadcast from 1", &t);
    let mut t = Tensor::from_slice(&[(f + 1.0) as f32]);
    dist::reduce(&mut t, n - 1, ReduceOp::Sum).unwrap();
    if rank == n - 1 {
        show("reduce sum to last", &t);
    }
    let gathered =
        dist::default_group().unwrap().all_gather_to_vec(&Tensor::from_slice(&[r * 10, r])).unwrap();
    show("all_gather", &Tensor::cat(&gathered, 0));
    dist::barrier().unwrap();
    println!("result barrier: passed");

    let mut big = Tensor::full([200_000], f + 1.0, (Kind::Float, tch::Device::Cpu));
    dist::all_reduce(&mut big, ReduceOp::Sum).unwrap();
    let summary = Tensor::from_slice(&[
        big.sum(Kind::Float).double_value(&[]),
        big.double_value(&[0]),
        big.double_value(&[-1]),
    ]);
    show("all_reduce sum of 200000", &summary);

    let mut one = Tensor::from_slice(&[1.0f32]);
    dist::all_reduce_async(&mut one, ReduceOp::Sum).unwrap().wait().unwrap();
    println!("result all_reduce async: done");

    let mut states = vec![
        Tensor::full([3], f, (Kind::Float, tch::Device::Cpu)),
        Tensor::from_slice(&[r, r + 1]),
        Tensor::arange(4, (Kind::Float, tch::Device::Cpu)) + f,
    ];
    dist::broadcast_coalesced(&dist::default_group().unwrap(), &mut states).unwrap();
    let flat: Vec<Tensor> = states.iter().map(|s| s.to_kind(Kind::Double)).collect();
    show("broadcast_coalesced", &Tensor::cat(&flat, 0));

    let ends = dist::new_group(Some(&[0, n - 1]), None).unwrap();
    assert_eq!(ends.is_some(), rank == 0 || rank == n - 1, "membership of new_group([0, n-1])");
    if let Some(group) = ends {
        let mut t = Tensor::from_slice(&[r]);
        group.all_reduce(&mut t, ReduceOp::Sum).unwrap();
        show(&format!("new_group first and last: group rank {} of {}", group.rank(), group.world_size()), &t);
    }
    let everyone = dist::new_group(None, None).unwrap().expect("every rank is in new_group(None)");
    let mut t = Tensor::from_slice(&[r]);
    everyone.all_reduce(&mut t, ReduceOp::Max).unwrap();
    show("new_group all", &t);

    let shard = Tensor::from_slice(&[r * 10, r]);
    let mut full = Tensor::zeros([2 * n as i64], (Kind::Int64, tch::Device::Cpu));
    dist::all_gather_into_tensor(&mut full, &shard).unwrap();
    show("all_gather_into_tensor", &full);
    let grads = Tensor::arange(2 * n as i64, (Kind::Float, tch::Device::Cpu)) + f;
    let mut grad_shard = Tensor::zeros([2], (Kind::Float, tch::Device::Cpu));
    dist::reduce_scatter_tensor(&mut grad_shard, &grads, ReduceOp::Sum).unwrap();
    show("reduce_scatter_tensor", &grad_shard);
    let message = Tensor::from_slice(&[(f * 7.0 + 1.0) as f32]);
    let sent = dist::isend(&message, (rank + 1) % n, 3).unwrap();
    let mut got = Tensor::zeros([1], (Kind::Float, tch::Device::Cpu));
    dist::irecv(&mut got, (rank + n - 1) % n, 3).unwrap().wait().unwrap();
    sent.wait().unwrap();
    show("ring", &got);

    dist::destroy_process_group().unwrap();
}

/// What rank `rank` of `n` must print, in order.
fn expected_results(rank: usize, n: usize) -> Vec<String> {
    let nf = n as f64;
    let fmt = |vs: &[f64]| vs.iter().map(|v| format!("{v:.4}")).collect::<Vec<_>>().join(" ");
    let ints = |vs: &[i64]| vs.iter().map(i64::to_string).collect::<Vec<_>>().join(" ");
    let last = (n - 1) as i64;
    let triangle = nf * (nf + 1.0) / 2.0;
    let mut lines = vec![
        format!("result all_reduce sum f32: {}", fmt(&[triangle, 0.5 * triangle])),
        format!("result all_reduce product f64: {}", fmt(&[(0..n).map(|r| r as f64 + 2.0).product()])),
        format!("result all_reduce min i64: {}", ints(&[10 - last, 0])),
        format!("result all_reduce max i32: {}", ints(&[last, 0])),
        format!("result broadcast from 1: {}", ints(&[107, 1])),
    ];
    if rank == n - 1 {
        lines.push(format!("result reduce sum to last: {}", fmt(&[triangle])));
    }
    let gathered: Vec<i64> = (0..n as i64).flat_map(|r| [r * 10, r]).collect();
    lines.push(format!("result all_gather: {}", ints(&gathered)));
    lines.push("result barrier: passed".into());
    lines.push(format!(
        "result all_reduce sum of 200000: {}",
        fmt(&[triangle * 200_000.0, triangle, triangle])
    ));
    lines.push("result all_reduce async: done".into());
    lines
        .push(format!("result broadcast_coalesced: {}", fmt(&[0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 2.0, 3.0])));
    if rank == 0 || rank == n - 1 {
        let group_rank = usize::from(rank != 0);
        lines.push(format!(
            "result new_group first and last: group rank {group_rank} of 2: {}",
            ints(&[last])
        ));
    }
    lines.push(format!("result new_group all: {}", ints(&[last])));
    lines.push(format!("result all_gather_into_tensor: {}", ints(&gathered)));
    // Element j of rank r's gradient is j + r; rank k keeps elements 2k and 2k + 1, summed.
    let tri = (0..n).map(|r| r as f64).sum::<f64>();
    let k = 2.0 * rank as f64;
    lines.push(format!("result reduce_scatter_tensor: {}", fmt(&[nf * k + tri, nf * (k + 1.0) + tri])));
    let prev = ((rank + n - 1) % n) as f64;
    lines.push(format!("result ring: {}", fmt(&[prev * 7.0 + 1.0])));
    lines
}

fn python() -> Option<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let python = root.join(".venv/bin/python");
    if python.exists() {
        return Some(python);
    }
    assert!(
        !torch_required(),
        "{} is missing although DDP_LAB_REQUIRE_TORCH is set: run scripts/setup.sh",
        python.display()
    );
    eprintln!("skipped: {} is missing (scripts/setup.sh installs it)", python.display());
    None
}

/// Runs a job whose rank `i` is Python where `languages[i]` is 'p', Rust where 'r'.
fn run_mixed(languages: &str, init: &str) {
    run_scenario_mixed("mixed", languages, init, expected_results);
}

/// Runs `scenario` on a job whose rank `i` is Python where `languages[i]` is 'p', Rust
/// where 'r'; every rank must print `expected(rank, n)`.
fn run_scenario_mixed(
    scenario: &str,
    languages: &str,
    init: &str,
    expected: fn(usize, usize) -> Vec<String>,
) {
    let Some(python) = python() else { return };
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/peer.py");
    let n = languages.len();
    let mut ranks = env_ranks(0..n, n, child_process::free_port().unwrap());
    for (spec, language) in ranks.iter_mut().zip(languages.chars()) {
        spec.env.push(("PEER_INIT".into(), init.into()));
        spec.env.push(("PEER_SCENARIO".into(), scenario.into()));
        if language == 'p' {
            spec.program = Some(vec![python.display().to_string(), script.display().to_string()]);
        }
    }
    // PyTorch checks no collective by default: the Rust ranks must not either, or they
    // would wait for helper groups the Python ranks never make.
    let outcomes = run_ranks(scenario, ranks, &[(dist::CHECK_COLLECTIVES_ENV, "0")], DEADLINE);
    for o in &outcomes {
        // A Python rank prints no Rust completion marker: its own last line instead.
        let python_rank = languages.as_bytes()[o.rank] == b'p';
        let finished = if python_rank {
            o.code == Some(0) && o.output.contains("python peer finished")
        } else {
            o.success
        };
        assert!(finished, "{languages} ({init}): rank {} did not finish:\n{}", o.rank, all_output(&outcomes));
        let got: Vec<&str> = o.output.lines().filter(|l| l.starts_with("result ")).collect();
        assert_eq!(
            got,
            expected(o.rank, n),
            "{languages} ({init}): rank {} ({}) printed other results:\n{}",
            o.rank,
            if python_rank { "Python" } else { "Rust" },
            all_output(&outcomes)
        );
    }
}

fn all_output(outcomes: &[RankOutcome]) -> String {
    outcomes.iter().map(|o| format!("--- rank {} (exit {:?})\n{}\n", o.rank, o.code, o.output)).collect()
}

#[test]
fn rust_rank_zero_hosts_the_store_for_a_python_rank() {
    run_mixed("rp", "env");
}

#[test]
fn python_rank_zero_hosts_the_store_for_a_rust_rank_over_tcp() {
    run_mixed("pr", "tcp");
}

#[test]
fn three_ranks_two_rust_one_python() {
    run_mixed("rpr", "env");
}

#[test]
fn three_ranks_two_python_one_rust_over_tcp() {
    run_mixed("prp", "tcp");
}

/// A device mesh made by Rust and Python ranks alike: the same groups along each
/// dimension, the whole world's dimension on the default group, and a group made after
/// both meshes numbered alike (else its store keys would differ and the job would hang).
#[test]
fn a_device_mesh_of_rust_and_python_ranks_makes_pytorchs_groups() {
    run_scenario_mixed("mesh", "rppr", "env", expected_mesh_results);
}
