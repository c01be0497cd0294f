//! Running a whole lab program (the Rust finished lab, or the PyTorch reference) and
//! reading its epoch lines (with labkit's [`EpochReport::parse`], beside the
//! formatter). Shared by the `lab` benchmark and the scaling demo, which therefore do
//! not depend on each other.
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

pub use atomic_file::{write_atomically, write_through_temp};
pub use labkit::EpochReport;

/// Names the course's folder for binaries run away from the checkout they were built
/// in (a GPU bundle, `scripts/gpu-bundle.sh`): the benchmarks' Python scripts and the
/// default data folder are found under it. The checker reads the same variable.
pub const ROOT_ENV: &str = "DDP_LAB_ROOT";

/// The workspace this was built in (the benchmarks' Python scripts, the data folder),
/// or the folder [`ROOT_ENV`] names.
pub fn workspace_root() -> PathBuf {
    if let Some(dir) = std::env::var_os(ROOT_ENV).filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.ancestors().nth(2).unwrap_or(manifest).to_path_buf()
}

/// Why a runner stopped: bad input (exit status 2) or a failed run (1).
pub enum Failure {
    BadInput(String),
    Run(String),
}

impl Failure {
    /// Prints the error, if any, and gives the exit status.
    pub fn exit(result: Result<(), Failure>) -> ExitCode {
        match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(Failure::BadInput(m)) => {
                eprintln!("error: {m}");
                ExitCode::from(2)
            }
            Err(Failure::Run(m)) => {
                eprintln!("error: {m}");
                ExitCode::FAILURE
            }
        }
    }
}

/// The mean images/sec of the epochs after the first (the first pays for warm-up:
/// allocator, caches, cudnn autotuning); None with fewer than two epochs.
pub fn steady_images_per_sec(epochs: &[EpochReport]) -> Option<f64> {
    let steady = epochs.get(1..).filter(|s| !s.is_empty())?;
    Some(steady.iter().map(|e| e.images_per_sec).sum::<f64>() / steady.len() as f64)
}

/// The training settings both programs get, the same on every run.
#[derive(Debug, Clone)]
pub struct LabSettings {
    pub width: String,
    pub batch_size: usize,
    pub epochs: usize,
    pub train_subset: Option<usize>,
    pub test_subset: Option<usize>,
    /// `--threads` per rank; None leaves torch's default.
    pub threads: Option<usize>,
    /// `cpu`, `cuda` or `auto`.
    pub device: String,
    pub dataset: String,
    pub data_dir: PathBuf,
    /// Extra options passed through to the program (e.g. `--amp bf16`).
    pub extra: Vec<String>,
}

impl LabSettings {
    /// Makes the data set ready once, before any run (so that no run pays for it or
    /// races on it), and points the settings at the copy found: `real` in the
    /// directory that holds it (the data directory, or the system's copy that Debian's
    /// `dataset-fashion-mnist` installs), or `generated` under the data directory.
    /// Both programs then read the same files. Returns what was used, whose
    /// [`summary`](labkit::DatasetReady::summary) says which data set it is.
    pub fn prepare_data(&mut self) -> Result<labkit::DatasetReady, labkit::DataError> {
        let kind: labkit::DatasetKind = self.dataset.parse()?;
        let ready = labkit::ensure_dataset(&labkit::DatasetOptions {
            dir: self.data_dir.clone(),
            kind,
            ..Default::default()
        })?;
        self.dataset = ready.kind_used.to_string();
        if ready.kind_used == labkit::DatasetKind::Real {
            self.data_dir = ready.dir.clone();
        }
        Ok(ready)
    }

    /// The lab's command line for `world_size` ranks on this node. The target accuracy
    /// is out of reach so that every run trains the same number of epochs.
    pub fn args(&self, world_size: usize) -> Vec<OsString> {
        let mut a: Vec<OsString> = Vec::new();
        let mut push = |k: &str, v: String| {
            a.push(k.into());
            a.push(v.into());
        };
        push("--num-gpus", world_size.to_string());
        push("--width", self.width.clone());
        push("--batch-size", self.batch_size.to_string());
        push("--epochs", self.epochs.to_string());
        push("--target-accuracy", "2".into());
        push("--device", self.device.clone());
        push("--dataset", self.dataset.clone());
        push("--data-dir", self.data_dir.display().to_string());
        if let Some(n) = self.train_subset {
            push("--train-subset", n.to_string());
        }
        if let Some(n) = self.test_subset {
            push("--test-subset", n.to_string());
        }
        if let Some(n) = self.threads {
            push("--threads", n.to_string());
        }
        a.extend(self.extra.iter().map(OsString::from));
        a
    }
}

/// What a finished run printed.
#[derive(Debug, Clone)]
pub struct LabOutput {
    pub epochs: Vec<EpochReport>,
    pub stdout: String,
}

/// How [`run_lab`] runs a program: what goes before the lab's options, on how many
/// ranks, for how long at most. The defaults: nothing before them (the Rust lab), one
/// rank, 30 minutes (the demo's `--timeout`, and PyTorch's process-group timeout).
#[derive(Debug, Clone, Copy)]
pub struct LabRun<'a> {
    /// Arguments before the lab's options (the reference's script, for `python`).
    pub prefix: &'a [OsString],
    /// Ranks on this node (`--num-gpus`).
    pub world_size: usize,
    /// The run's whole process group is killed after this.
    pub timeout: Duration,
}

impl Default for LabRun<'_> {
    fn default() -> Self {
        LabRun { prefix: &[], world_size: 1, timeout: Duration::from_secs(30 * 60) }
    }
}

/// Runs `program prefix… settings.args(world_size)` with its rendezvous on a free
/// loopback port and `OMP_NUM_THREADS` matching `--threads`; fails when it exits
/// non-zero, runs past `timeout` (then its whole process group is killed), or prints
/// fewer epoch lines than asked for.
pub fn run_lab(program: &Path, settings: &LabSettings, run: LabRun<'_>) -> Result<LabOutput, String> {
    let LabRun { prefix, world_size, timeout } = run;
    let port = child_process::free_port().map_err(|e| format!("no free port: {e}"))?;
    let mut cmd = Command::new(program);
    cmd.args(prefix)
        .args(settings.args(world_size))
        .env(tch_distributed::MASTER_ADDR_ENV, "127.0.0.1")
        .env(tch_distributed::MASTER_PORT_ENV, port.to_string())
        .env_remove(labkit::trace::TRACE_ENV);
    if let Some(n) = settings.threads {
        cmd.env("OMP_NUM_THREADS", n.to_string());
    }
    let shown = format!("{} {}", program.display(), world_size);
    // Its own process group, dying with this process: on a timeout, a Ctrl-C or a crash
    // here every rank it started goes with it.
    let out = child_process::output(cmd, Some(timeout))
        .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
    let (stdout, stderr) = (out.stdout, out.stderr);
    let tail = |s: &str| {
        s.lines().rev().take(8).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")
    };
    if out.timed_out {
        return Err(format!(
            "{shown}: still running after {} s, killed\n{}",
            timeout.as_secs(),
            tail(&stderr)
        ));
    }
    if !out.status.success() {
        return Err(format!(
            "{} ({world_size} ranks) failed ({}):\n{}\n{}",
            program.display(),
            child_process::describe(out.status),
            tail(&stdout),
            tail(&stderr)
        ));
    }
    let epochs: Vec<EpochReport> = stdout.lines().filter_map(EpochReport::parse).collect();
    if epochs.len() != settings.epochs {
        return Err(format!(
            "{} ({world_size} ranks) printed {} epoch lines, expected {}:\n{}",
            program.display(),
            epochs.len(),
            settings.epochs,
            tail(&stdout)
        ));
    }
    Ok(LabOutput { epochs, stdout })
}

/// The finished lab's binary (solutions/step_11) beside the running executable, in the
/// same target directory and profile. Under `cargo run` (which sets `CARGO`) it is
/// built first, so the benchmark never times a stale binary.
pub fn finished_lab_binary() -> Result<PathBuf, String> {
    sibling_binary("solution_11", "solution_11")
}

/// A binary of this workspace beside the running executable, built first when under cargo.
pub fn sibling_binary(package: &str, bin: &str) -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate this executable: {e}"))?;
    let dir = exe.parent().ok_or("this executable has no directory")?.to_path_buf();
    if std::env::var_os("CARGO").is_some() {
        let release = dir.file_name().is_some_and(|n| n == "release");
        // As a plain `cargo build` runs (not with what cargo set for this program): the
        // lab's build is reused, not redone.
        let mut build = child_process::cargo();
        build.args(["build", "-q", "-p", package, "--bin", bin]).current_dir(workspace_root());
        if release {
            build.arg("--release");
        }
        let status = child_process::spawn(build)
            .and_then(|mut cargo| cargo.wait())
            .map_err(|e| format!("cannot run cargo to build {bin}: {e}"))?;
        if !status.success() {
            return Err(format!("building {bin} failed ({status})"));
        }
    }
    let path = dir.join(bin);
    if !path.is_file() {
        return Err(format!(
            "{} is missing: build it with `cargo build --release -p {package} --bin {bin}` (or start this through cargo run)",
            path.display()
        ));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steady_throughput_drops_the_first_epoch() {
        let e = |ips| EpochReport {
            epoch: 0,
            cumulative_time: 1.0,
            epoch_time: 1.0,
            images_per_sec: ips,
            validation_loss: 0.0,
            validation_accuracy: 0.0,
        };
        assert_eq!(steady_images_per_sec(&[e(1.0), e(10.0), e(20.0)]), Some(15.0));
        assert_eq!(steady_images_per_sec(&[e(1.0)]), None);
        assert_eq!(steady_images_per_sec(&[]), None);
    }

    #[test]
    fn settings_become_the_labs_options() {
        let s = LabSettings {
            width: "narrow".into(),
            batch_size: 32,
            epochs: 3,
            train_subset: Some(100),
            test_subset: None,
            threads: Some(1),
            device: "cpu".into(),
            dataset: "generated".into(),
            data_dir: "data".into(),
            extra: vec!["--channels-last".into()],
        };
        let args: Vec<String> = s.args(2).into_iter().map(|a| a.into_string().unwrap()).collect();
        let joined = args.join(" ");
        assert!(joined.starts_with("--num-gpus 2 --width narrow --batch-size 32 --epochs 3"), "{joined}");
        assert!(joined.contains("--train-subset 100") && !joined.contains("--test-subset"));
        assert!(joined.ends_with("--threads 1 --channels-last"), "{joined}");
    }
}
