//! DDP across languages: Rust ranks (`ddp_peer`: labkit's WideResNet under
//! tch-distributed's DistributedDataParallel) and PyTorch ranks
//! (`bench/python/ddp_peer.py`: `bench/python/wideresnet.py` under PyTorch's
//! DistributedDataParallel) train in one Gloo group. Every rank, whatever its
//! language, starts from rank 0's broadcast weights and ends with bit-identical ones
//! after the same SGD steps; the Python rank also checks that they are where one
//! process with the whole batch ends (N ranks x B = 1 x N*B, across languages).
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const STEPS: usize = 3;
const BATCH: i64 = 4;
const LR: f64 = 0.05;
/// Both sides' runs together take seconds; this only bounds a hang.
const DEADLINE: Duration = Duration::from_secs(300);
/// How far N ranks x B may land from 1 x N*B: float32 on the CPU; on GPUs cuDNN's
/// default TF32 convolutions round to 10-bit mantissas.
const CPU_BOUND: f64 = 1e-5;
const GPU_BOUND: f64 = 1e-3;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The venv's Python, or None (and the test skips) where setup has not run.
fn python() -> Option<PathBuf> {
    let python = workspace().join(".venv/bin/python");
    if !python.exists() {
        assert!(
            std::env::var_os("DDP_LAB_REQUIRE_TORCH").is_none(),
            "{} is missing although DDP_LAB_REQUIRE_TORCH is set: run scripts/setup.sh",
            python.display()
        );
        eprintln!("skipped: {} is missing (scripts/setup.sh installs it)", python.display());
        return None;
    }
    Some(python)
}

/// One rank's command: Python for 'p', Rust for 'r'.
fn rank_command(python: &Path, language: char) -> Command {
    if language == 'p' {
        let mut cmd = Command::new(python);
        cmd.arg(workspace().join("bench/python/ddp_peer.py"));
        cmd
    } else {
        Command::new(env!("CARGO_BIN_EXE_ddp_peer"))
    }
}

/// Runs a job whose rank `i` is Python where `languages[i]` is 'p', Rust where 'r', on
/// `device` (`cpu` or `cuda`: then rank i on cuda:i); returns each rank's output.
fn run_mixed(languages: &str, device: &str) -> Option<Vec<String>> {
    let python = python()?;
    let port = child_process::free_port().unwrap();
    let n = languages.len();
    let ranks: Vec<child_process::Child> = languages
        .chars()
        .enumerate()
        .map(|(rank, language)| {
            let mut cmd = rank_command(&python, language);
            // Both programs take the same options.
            let (steps, batch, lr) = (STEPS.to_string(), BATCH.to_string(), LR.to_string());
            cmd.args(["--steps", &steps, "--batch-size", &batch, "--lr", &lr, "--device", device]);
            cmd.env(tch_distributed::RANK_ENV, rank.to_string())
                .env(tch_distributed::LOCAL_RANK_ENV, rank.to_string())
                .env(tch_distributed::WORLD_SIZE_ENV, n.to_string())
                .env(tch_distributed::MASTER_ADDR_ENV, "127.0.0.1")
                .env(tch_distributed::MASTER_PORT_ENV, port.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            child_process::spawn(cmd).expect("start a rank")
        })
        .collect();
    // Every rank waited for (and its pipes drained) at once: a rank blocked on a full
    // pipe would stall the collectives of the others.
    let waits: Vec<_> = ranks
        .into_iter()
        .map(|child| {
            std::thread::spawn(move || {
                let out = child.wait_with_output(Some(DEADLINE)).expect("wait for a rank");
                format!("(exit: {})\n{}{}", out.describe(), out.stdout, out.stderr)
            })
        })
        .collect();
    Some(waits.into_iter().map(|w| w.join().unwrap()).collect())
}

fn line<'a>(output: &'a str, prefix: &str) -> Option<&'a str> {
    output.lines().find(|l| l.starts_with(prefix))
}

fn check(languages: &str, device: &str) {
    let Some(outputs) = run_mixed(languages, device) else { return };
    let all = outputs.iter().enumerate().map(|(r, o)| format!("--- rank {r}\n{o}\n")).collect::<String>();
    for (rank, out) in outputs.iter().enumerate() {
        let done =
            if languages.as_bytes()[rank] == b'p' { "python peer finished" } else { "rust rank finished" };
        assert!(out.contains(done), "{languages}: rank {rank} did not finish:\n{all}");
    }
    for what in ["start: ", "end: "] {
        let first = line(&outputs[0], what).unwrap();
        for (rank, out) in outputs.iter().enumerate() {
            assert_eq!(
                line(out, what),
                Some(first),
                "{languages}: rank {rank}'s {what}weights differ from rank 0's:\n{all}"
            );
        }
    }
    assert_ne!(line(&outputs[0], "start: "), line(&outputs[0], "end: "), "the weights never moved:\n{all}");
    // The Python ranks' one-process reference: same start, whole batch, same steps.
    for (rank, out) in outputs.iter().enumerate().filter(|(r, _)| languages.as_bytes()[*r] == b'p') {
        let text = line(out, "reference max diff: ").unwrap();
        let diff: f64 =
            text["reference max diff: ".len()..].split_whitespace().next().unwrap().parse().unwrap();
        let bound = if device == "cuda" { GPU_BOUND } else { CPU_BOUND };
        assert!(diff < bound, "{languages}: rank {rank}: N ranks x B is not 1 x N*B: {text}\n{all}");
    }
}

#[test]
fn a_rust_and_a_python_rank_train_to_the_same_weights() {
    check("rp", "cpu");
}

#[test]
fn python_rank_zero_two_rust_ranks_and_another_python_rank() {
    check("prrp", "cpu");
}

/// The same job over NCCL, a GPU per rank: needs a node with 2 GPUs (NCCL refuses two
/// ranks on one device); elsewhere it says so and passes.
#[test]
fn a_rust_and_a_python_rank_over_nccl_on_two_gpus() {
    let gpus = tch::Cuda::device_count();
    if gpus < 2 {
        eprintln!("skipped: {gpus} GPU(s) here; the NCCL job needs 2");
        return;
    }
    check("rp", "cuda");
}

/// `--device cuda` where it cannot work (no GPU, or fewer GPUs than the rank's local
/// rank) is refused before any rendezvous, on both sides alike: exit code 2 and a
/// message that names the way out.
#[test]
fn cuda_without_a_gpu_for_the_rank_is_refused_on_both_sides() {
    let Some(python) = python() else { return };
    for language in ['r', 'p'] {
        let mut cmd = rank_command(&python, language);
        cmd.args(["--device", "cuda"])
            .env(tch_distributed::RANK_ENV, "0")
            .env(tch_distributed::LOCAL_RANK_ENV, "4096")
            .env(tch_distributed::WORLD_SIZE_ENV, "2")
            .env(tch_distributed::MASTER_ADDR_ENV, "127.0.0.1")
            // Nothing listens there: a rank that got as far as the rendezvous would fail
            // differently (or wait), not with the message below.
            .env(tch_distributed::MASTER_PORT_ENV, child_process::free_port().unwrap().to_string());
        let out = child_process::output(cmd, Some(Duration::from_secs(120))).expect("run a rank");
        let text = format!("{}{}", out.stdout, out.stderr);
        assert_eq!(out.status.code(), Some(2), "{language}: {text}");
        assert!(text.contains("--device cuda: ") && text.contains("--device cpu"), "{language}: {text}");
        assert!(!text.contains("rank 0 of"), "{language}: it went on to the rendezvous: {text}");
    }
}

/// Every value printed after `tag` in the shared output of two processes: the run of
/// digits, signs and spaces that follows it. The two ranks write to one pipe, so one's
/// line can land before the other's newline; splitting on the tag, not on lines, reads
/// them the same however the writes interleaved.
fn values_after<'a>(text: &'a str, tag: &str) -> Vec<&'a str> {
    text.split(tag)
        .skip(1)
        .map(|rest| {
            let end =
                rest.find(|c: char| !(c.is_ascii_digit() || c == '-' || c == ' ')).unwrap_or(rest.len());
            rest[..end].trim()
        })
        .collect()
}

/// The guide's "One job, two languages" commands (`lab-guide/src/maintainers/tch-distributed.md`,
/// which README links to), run as written (with this build's
/// `ddp_peer` for `target/release/ddp_peer`, and a free port).
#[test]
fn the_guide_example_runs_as_written() {
    if !workspace().join(".venv/bin/python").exists() {
        assert!(
            std::env::var_os("DDP_LAB_REQUIRE_TORCH").is_none(),
            "the venv is missing: run scripts/setup.sh"
        );
        return;
    }
    let page =
        std::fs::read_to_string(workspace().join("lab-guide/src/maintainers/tch-distributed.md")).unwrap();
    let section = &page[page.find("## One job, two languages").expect("the guide's mixed-job section")..];
    let block =
        section.split("```sh\n").nth(1).and_then(|b| b.split("```").next()).expect("its first sh block");
    assert!(block.contains("cargo build --release -p ddp-bench --bin ddp_peer"), "{block}");
    let port = child_process::free_port().unwrap().to_string();
    let script: String = block
        .lines()
        .filter(|l| !l.starts_with("cargo build"))
        .map(|l| {
            l.replace("target/release/ddp_peer", env!("CARGO_BIN_EXE_ddp_peer")).replace("29512", &port)
                + "\n"
        })
        .collect();
    let mut cmd = Command::new("bash");
    cmd.args(["-euc", &script]).current_dir(workspace());
    let out = child_process::output(cmd, Some(DEADLINE)).expect("run the guide's commands");
    let text = format!("{}{}", out.stdout, out.stderr);
    assert!(out.success(), "{script}\n{text}");
    let starts = values_after(&text, "start: ");
    let ends = values_after(&text, "end: ");
    assert_eq!((starts.len(), ends.len()), (2, 2), "{text}");
    assert!(starts[0] == starts[1] && ends[0] == ends[1], "the two ranks differ:\n{text}");
    assert!(text.contains("rust rank finished") && text.contains("python peer finished"), "{text}");
}
