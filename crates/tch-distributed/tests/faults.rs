//! Failure paths: a rank that never arrives, a busy port, bad arguments rejected
//! before any network activity, NCCL without a GPU, torchrun's agent-hosted store.
mod common;

use std::io::ErrorKind as IoErrorKind;
use std::net::TcpListener;
use std::time::{Duration, Instant};

use common::*;
use dist::{Backend, ErrorKind, Init, ReduceOp, Store, TcpStoreOptions};
use tch::Tensor;
use tch_distributed as dist;

const DEADLINE: Duration = Duration::from_secs(120);

/// Entry point of every rank process (started by the tests below, never by hand).
#[test]
#[ignore = "rank process entry point: the multi-process tests start it themselves"]
fn rank_entry() {
    run_scenario(&[("join", join_scenario)]);
}

/// Joins over env:// with `TCHD_TIMEOUT_MS`, all-reduces once. On error, prints its
/// kind, how long it took and the message, then still completes: the test judges.
fn join_scenario() {
    let timeout = Duration::from_millis(env_usize("TCHD_TIMEOUT_MS") as u64);
    let started = Instant::now();
    let result = dist::init_process_group(Backend::Gloo, dist::InitOptions { timeout, ..Default::default() })
        .and_then(|()| {
            let mut t = Tensor::from_slice(&[1.0f32]);
            dist::all_reduce(&mut t, ReduceOp::Sum)?;
            Ok(t.double_value(&[0]))
        });
    match result {
        Ok(sum) => println!("JOINED sum={sum}"),
        Err(e) => {
            println!("FAILED kind={:?} after_ms={} message={e}", e.kind(), started.elapsed().as_millis())
        }
    }
}

fn field<'a>(output: &'a str, key: &str) -> Option<&'a str> {
    output.split_whitespace().find_map(|w| w.strip_prefix(key))
}

/// A world of 3 where one rank never starts: the others must fail with a timeout
/// error, not hang. `missing` is the rank that does not come.
fn missing_rank(missing: usize) {
    let timeout_ms = 3000u64;
    let port = child_process::free_port().unwrap();
    let ranks = env_ranks((0..3).filter(|r| *r != missing), 3, port);
    let outcomes = run_ranks("join", ranks, &[("TCHD_TIMEOUT_MS", &timeout_ms.to_string())], DEADLINE);
    assert_all_ok(&outcomes); // every present rank returned (with an error) instead of hanging
    for o in &outcomes {
        eprintln!("missing rank {missing}, rank {} said: {}", o.rank, o.output.trim());
        let kind = field(&o.output, "kind=")
            .unwrap_or_else(|| panic!("rank {} did not fail:\n{}", o.rank, o.output));
        let after_ms: u64 = field(&o.output, "after_ms=").unwrap().parse().unwrap();
        // A timeout is the expected failure; a rank whose peer gave up first may instead
        // see that peer's socket close, which is just as final.
        assert!(
            kind == "Timeout" || kind == "Network" || kind == "Backend",
            "rank {}: unexpected error kind {kind}:\n{}",
            o.rank,
            o.output
        );
        // Liveness bound, not a speed measurement: far below the harness deadline.
        assert!(after_ms < 4 * timeout_ms + 10_000, "rank {} took {after_ms} ms:\n{}", o.rank, o.output);
    }
    // At least one rank names the timeout itself.
    assert!(
        outcomes.iter().any(|o| field(&o.output, "kind=") == Some("Timeout")),
        "no rank reported a timeout: {outcomes:#?}"
    );
}

#[test]
fn a_worker_that_never_arrives_times_the_others_out() {
    missing_rank(2);
}

#[test]
fn rank_zero_that_never_arrives_times_the_others_out() {
    missing_rank(0);
}

#[test]
fn busy_port_is_a_clear_error() {
    let holder = TcpListener::bind("0.0.0.0:0").unwrap();
    let port = holder.local_addr().unwrap().port();
    let e = Store::tcp(&TcpStoreOptions {
        host: "127.0.0.1".into(),
        port,
        is_server: true,
        world_size: Some(1),
        wait_for_workers: false,
        timeout: Duration::from_secs(5),
    })
    .err()
    .expect("binding a taken port must fail");
    assert_eq!(e.kind(), ErrorKind::AddressInUse, "{e}");
    assert!(e.message().contains(&format!("port {port} is taken")), "{e}");
    assert!(e.message().contains("MASTER_PORT"), "{e}");

    // The same through a whole rank: rank 0 of a group cannot host its store.
    let rdzv =
        dist::Rendezvous::resolve(&Init::Tcp { host: "127.0.0.1".into(), port }, Some(1), Some(0)).unwrap();
    let e = dist::connect(&rdzv, Backend::Gloo, Duration::from_secs(5)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AddressInUse, "{e}");
}

/// Bad input fails before any network activity: a listener on the rendezvous port
/// sees no connection attempt.
#[test]
fn invalid_rank_or_world_size_is_rejected_before_the_network() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let init = Init::Tcp { host: "127.0.0.1".into(), port };
    let cases = [
        (Some(2), Some(2), "rank 2 is not below the world size 2"),
        (Some(0), Some(0), "world size must be at least 1"),
    ];
    for (world, rank, text) in cases {
        let started = Instant::now();
        let e = dist::init_process_group(
            Backend::Gloo,
            dist::InitOptions {
                init_method: init.clone(),
                world_size: world,
                rank,
                timeout: Duration::from_secs(30),
            },
        )
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
        assert!(e.message().contains(text), "{e}");
        assert!(started.elapsed() < Duration::from_secs(5), "validation must not wait on anything");
    }
    assert!(!dist::is_initialized());
    match listener.accept() {
        Err(e) if e.kind() == IoErrorKind::WouldBlock => {}
        other => panic!("something connected to the rendezvous port: {other:?}"),
    }
}

#[test]
fn nccl_without_a_gpu_is_a_clear_error_before_the_network() {
    if tch::Cuda::is_available() {
        eprintln!("skipped: this machine has a GPU, so NCCL is available");
        return;
    }
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let rdzv =
        dist::Rendezvous::resolve(&Init::Tcp { host: "127.0.0.1".into(), port }, Some(2), Some(1)).unwrap();
    let e = dist::connect(&rdzv, Backend::Nccl, Duration::from_secs(30)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
    assert!(e.message().contains("Backend::Gloo"), "{e}");
    assert!(!Backend::Nccl.is_available());
    assert!(matches!(listener.accept(), Err(e) if e.kind() == IoErrorKind::WouldBlock));
    // The build itself has the NCCL path compiled in whenever libtorch has CUDA libraries.
    let cuda_libs =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.libtorch/lib/libtorch_cuda.so");
    assert_eq!(dist::nccl_compiled_in(), cuda_libs.exists());
}

/// Bad environment values name the variable; the process never reaches the network.
#[test]
fn bad_environment_values_name_the_variable() {
    let port = child_process::free_port().unwrap().to_string();
    let cases: [(&[(&str, &str)], &str); 4] = [
        (&[("MASTER_PORT", &port), ("RANK", "0"), ("WORLD_SIZE", "2")], "MASTER_ADDR"),
        (
            &[("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "http"), ("RANK", "0"), ("WORLD_SIZE", "2")],
            "MASTER_PORT",
        ),
        (
            &[("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", &port), ("RANK", "-1"), ("WORLD_SIZE", "2")],
            "RANK",
        ),
        (
            &[("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", &port), ("RANK", "0"), ("WORLD_SIZE", "two")],
            "WORLD_SIZE",
        ),
    ];
    for (env, var) in cases {
        let mut spec = RankSpec { rank: 0, env: vec![], program: None };
        spec.env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let out = run_ranks("join", vec![spec], &[("TCHD_TIMEOUT_MS", "30000")], DEADLINE);
        assert_all_ok(&out);
        let o = &out[0].output;
        assert_eq!(field(o, "kind="), Some("InvalidArgument"), "{var}: {o}");
        assert!(o.contains(var), "the message must name {var}: {o}");
        let after_ms: u64 = field(o, "after_ms=").unwrap().parse().unwrap();
        assert!(after_ms < 5000, "{var}: validation waited {after_ms} ms");
    }
}

/// torchrun's agent hosts the store (TORCHELASTIC_USE_AGENT_STORE=True): every rank,
/// rank 0 included, must connect as a client. Here the test hosts it, so a rank 0 that
/// tried to host it too would fail on the busy port.
#[test]
fn agent_store_makes_every_rank_a_client() {
    let store = Store::tcp(&TcpStoreOptions {
        host: "127.0.0.1".into(),
        port: 0,
        is_server: true,
        world_size: None,
        wait_for_workers: false,
        timeout: Duration::from_secs(60),
    })
    .unwrap();
    let port = store.port().unwrap();
    let outcomes = run_ranks(
        "join",
        env_ranks(0..2, 2, port),
        &[("TCHD_TIMEOUT_MS", "60000"), ("TORCHELASTIC_USE_AGENT_STORE", "True")],
        DEADLINE,
    );
    assert_all_ok(&outcomes);
    for o in &outcomes {
        assert_eq!(field(&o.output, "sum="), Some("2"), "rank {}:\n{}", o.rank, o.output);
    }
    drop(store);
}

/// Ranks of one job started with different world sizes: whichever of them comes second
/// to the store says so (both sizes, and the fix) before creating the group; the other
/// gives up at its timeout instead of hanging.
#[test]
fn ranks_with_different_world_sizes_are_a_clear_error() {
    let port = child_process::free_port().unwrap();
    let mut ranks = env_ranks(0..2, 2, port);
    for (k, v) in ranks[1].env.iter_mut() {
        if k == "WORLD_SIZE" {
            *v = "3".into();
        }
    }
    let outcomes = run_ranks("join", ranks, &[("TCHD_TIMEOUT_MS", "4000")], DEADLINE);
    assert_all_ok(&outcomes);
    let (zero, one) = (&outcomes[0].output, &outcomes[1].output);
    let told = |out: &str| field(out, "kind=") == Some("InvalidArgument");
    let (second, first) = match (told(zero), told(one)) {
        (false, true) => (one, zero),
        (true, false) => (zero, one),
        _ => panic!("exactly one rank must name the mismatch:\n--- rank 0\n{zero}\n--- rank 1\n{one}"),
    };
    let named = second.contains("different world sizes: rank 1 has world size 3, rank 0 has 2")
        || second.contains("different world sizes: rank 0 has world size 2, rank 1 has 3");
    assert!(named, "{second}");
    assert!(second.contains("WORLD_SIZE"), "{second}");
    assert!(field(first, "kind=").is_some(), "the other rank must fail, not join: {first}");
}

/// The listening sockets of this process on `port`, as (address, port) from
/// /proc/net/tcp and /proc/net/tcp6 (state 0A = LISTEN).
fn listening_addresses(port: u16) -> Vec<String> {
    let mut found = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else { continue };
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            if cols.len() < 4 || cols[3] != "0A" {
                continue;
            }
            let (addr, p) = cols[1].split_once(':').unwrap();
            if u16::from_str_radix(p, 16).unwrap() == port {
                found.push(addr.to_string());
            }
        }
    }
    found
}

/// The store has no authentication: a single-node store listens on loopback only,
/// never on every interface (c10d's own default).
#[test]
fn a_local_store_listens_on_loopback_only() {
    for host in ["localhost", "127.0.0.1"] {
        let store = Store::tcp(&TcpStoreOptions {
            host: host.into(),
            port: 0,
            is_server: true,
            world_size: Some(1),
            wait_for_workers: false,
            timeout: Duration::from_secs(10),
        })
        .unwrap();
        let port = store.port().unwrap();
        let addrs = listening_addresses(port);
        eprintln!("{host}: port {port} listens on {addrs:?}");
        // 0100007F is 127.0.0.1 in /proc's byte order.
        assert_eq!(addrs, vec!["0100007F".to_string()], "{host}: the store must listen on 127.0.0.1 only");
        drop(store);
    }
}

/// A rendezvous address that is not this machine's is refused before anything waits.
#[test]
fn hosting_the_store_on_a_foreign_address_is_a_clear_error() {
    let e = Store::tcp(&TcpStoreOptions {
        host: "192.0.2.1".into(), // TEST-NET-1: never assigned to a machine
        port: 0,
        is_server: true,
        world_size: Some(2),
        wait_for_workers: false,
        timeout: Duration::from_secs(5),
    })
    .err()
    .expect("binding an address this machine does not have must fail");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(e.message().contains("not an address of this machine"), "{e}");
}
