//! What the benchmark binaries share: finding the Python side, ports, statistics, and
//! reporting results.
use std::path::{Path, PathBuf};
use std::process::Command;

use lab_program::workspace_root;

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
