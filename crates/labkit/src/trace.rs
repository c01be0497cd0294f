//! The trace the checker reads: per-process JSON lines under `DDP_LAB_TRACE`.
//!
//! Student code never writes it. labkit's own helpers (the data loaders, `train`,
//! `test`, the report) record what they see, so the checker can judge a student's
//! program from facts (which indices a rank iterated, what its weights were after
//! each epoch) instead of from what the program claims.
//!
//! Each process appends to `<dir>/trace-<pid>.jsonl`; every line is one
//! [`lab_trace::Record`]: an event of [`lab_trace::event`] (the one definition the
//! checker reads too) with `pid`, `local_rank`, and `rank` / `world_size` once the
//! default process group exists. A line is written with one `write` on an `O_APPEND`
//! file, so lines never interleave, even when a process is killed mid-run.
use std::fs::{File, OpenOptions};
use std::hash::Hasher;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

pub use lab_trace::TRACE_ENV;
use lab_trace::{event, Event, Record};
use tch::{Kind, Tensor};
use tch_distributed as dist;

/// The trace file of this process, opened on first use; `None` when tracing is off
/// or the file cannot be created (a warning is printed once; training goes on).
fn sink() -> Option<&'static Mutex<File>> {
    // Process-wide: one file per rank process, written from every labkit call the lab
    // makes (train, test, load_dataset, ...) and from tch-distributed's collective
    // observer, none of which the student's code hands a trace to (the lab's calls are
    // PyTorch's, which have no such argument).
    static SINK: OnceLock<Option<Mutex<File>>> = OnceLock::new();
    SINK.get_or_init(|| {
        let dir = PathBuf::from(std::env::var_os(TRACE_ENV).filter(|d| !d.is_empty())?);
        let path = dir.join(lab_trace::file_name(std::process::id()));
        let opened = std::fs::create_dir_all(&dir)
            .and_then(|_| OpenOptions::new().create(true).append(true).open(&path));
        match opened {
            Ok(f) => {
                dist::debug::set_collective_observer(record_collective);
                dist::debug::set_group_observer(record_group);
                Some(Mutex::new(f))
            }
            Err(e) => {
                eprintln!("warning: cannot write the trace file {}: {e}", path.display());
                None
            }
        }
    })
    .as_ref()
}

/// One `collective` event per collective the program issues (the checker judges steps
/// 8 and 9 from them: what was asked of the library, not what Gloo left in a buffer).
fn record_collective(call: &dist::debug::CollectiveCall) {
    record(event::Collective {
        op: call.op,
        reduce_op: call.reduce_op,
        root: call.root,
        dtype: call.dtype.map(dtype),
        numel: call.numel,
        seq: call.seq,
        group: call.group,
        values: call.values.clone(),
        site: call.site.map(|at| format!("{}:{}:{}", at.file(), at.line(), at.column())),
    });
}

/// One `group_created` event per group the program makes or numbers (what a
/// collective's `group` number stands for: its ranks, and its mesh dimension).
fn record_group(made: &dist::debug::GroupCreation) {
    record(event::GroupCreated {
        group: made.group,
        ranks: made.ranks.clone(),
        group_rank: made.rank,
        mesh_dim: made.mesh_dim.clone(),
    });
}

// tch-distributed's collectives and reduce ops are the trace's own values (one
// definition, in pytorch-names); its dtype is tch's `Kind`, written by tch's name. The
// match is exhaustive (no `_` arm) so that a kind added to tch fails to compile here
// instead of reaching the checker under a guessed name.

/// The trace's dtype: tch's name for the kind (its `Debug` text, `Float`), which the
/// trace held before it was typed.
fn dtype(kind: Kind) -> lab_trace::Dtype {
    use lab_trace::Dtype as T;
    match kind {
        Kind::Uint8 => T::Uint8,
        Kind::Int8 => T::Int8,
        Kind::Int16 => T::Int16,
        Kind::Int => T::Int,
        Kind::Int64 => T::Int64,
        Kind::Half => T::Half,
        Kind::Float => T::Float,
        Kind::Double => T::Double,
        Kind::ComplexHalf => T::ComplexHalf,
        Kind::ComplexFloat => T::ComplexFloat,
        Kind::ComplexDouble => T::ComplexDouble,
        Kind::Bool => T::Bool,
        Kind::QInt8 => T::QInt8,
        Kind::QUInt8 => T::QUInt8,
        Kind::QInt32 => T::QInt32,
        Kind::BFloat16 => T::BFloat16,
        Kind::Float8e5m2 => T::Float8e5m2,
        Kind::Float8e4m3fn => T::Float8e4m3fn,
        Kind::Float8e5m2fnuz => T::Float8e5m2fnuz,
        Kind::Float8e4m3fnuz => T::Float8e4m3fnuz,
    }
}

/// Whether `DDP_LAB_TRACE` is on for this process.
pub fn enabled() -> bool {
    sink().is_some()
}

/// This process's local rank: given by `spawn`, or by a launcher in `LOCAL_RANK`.
pub fn local_rank() -> Option<usize> {
    if let Some(me) = dist::spawned_rank() {
        return Some(me.local_rank);
    }
    dist::local_rank().ok().flatten()
}

/// This process's rank: the global rank once the process group exists, the local rank
/// before that; `None` when neither is known (a single-process program is rank 0).
pub(crate) fn rank() -> Option<usize> {
    dist::get_rank().ok().or_else(local_rank)
}

/// Appends one event, stamped with this process's ranks and the time.
pub fn record(event: impl Into<Event>) {
    let Some(sink) = sink() else { return };
    let mut line = Record::now(event);
    // SAFETY: getppid has no preconditions. The parent tells spawned ranks apart.
    line.ppid = i64::from(unsafe { libc::getppid() });
    line.local_rank = local_rank();
    line.rank = dist::get_rank().ok();
    line.world_size = dist::get_world_size().ok();
    if let Event::World(world) = &line.event {
        // The world the program announces, before any group exists.
        line.world_size = Some(world.world_size);
    }
    let mut text = line.to_line();
    text.push('\n');
    let mut file = sink.lock().unwrap_or_else(|p| p.into_inner());
    // A failed trace write must not stop training; the checker reports the gap.
    let _ = file.write_all(text.as_bytes());
}

/// What the trace records of a model's weights after an epoch.
#[derive(Debug, Clone, PartialEq)]
pub struct WeightsFingerprint {
    /// FNV-1a of every value's bytes, in order: equal exactly when the weights are
    /// bit-for-bit equal (DDP keeps ranks bit-identical).
    pub digest: String,
    /// The weights projected onto eight fixed pseudo-random directions: close (not
    /// equal) when two runs reach nearly the same weights by different arithmetic,
    /// as N ranks × batch B and 1 rank × batch N·B do.
    pub projection: [f64; 8],
}

/// Fingerprints `tensors` (as f64 on the CPU, in the order given).
pub fn fingerprint(tensors: &[Tensor]) -> WeightsFingerprint {
    let mut hash = fnv::FnvHasher::default();
    let mut projection = [0.0f64; 8];
    let mut offset = 0usize;
    tch::no_grad(|| {
        for t in tensors {
            let values = t.detach().to_device(tch::Device::Cpu).to_kind(Kind::Double).flatten(0, -1);
            let values: Vec<f64> = Vec::<f64>::try_from(&values).unwrap_or_default();
            for (i, v) in values.iter().enumerate() {
                hash.write(&(*v as f32).to_le_bytes());
                let position = (offset + i) as f64 + 1.0;
                for (k, p) in projection.iter_mut().enumerate() {
                    // Deterministic directions that do not depend on tch's RNG.
                    *p += v * (position * (k as f64 + 1.0) * 0.618_033_988_749_895).sin();
                }
            }
            offset += values.len();
        }
    });
    WeightsFingerprint { digest: format!("{:016x}", hash.finish()), projection }
}

/// Records the weights of `tensors` before the first epoch's first step (after DDP's
/// broadcast): the point the checker measures training's progress from.
pub fn record_initial_weights(tensors: &[Tensor]) {
    if !enabled() {
        return;
    }
    let f = fingerprint(tensors);
    record(event::InitialWeights { digest: f.digest, projection: f.projection });
}

/// Records the weights of `tensors` after `epoch` (0-based) of training.
pub fn record_weights(epoch: usize, tensors: &[Tensor]) {
    if !enabled() {
        return;
    }
    let f = fingerprint(tensors);
    record(event::Weights { epoch, digest: f.digest, projection: f.projection });
}

/// Records the run's first training step: its loss (where this rank computed it) and
/// the values of `tensors` after it, the weights the optimizer steps.
pub fn record_first_step(loss: Option<f64>, tensors: &[Tensor]) {
    if !enabled() {
        return;
    }
    record(event::FirstStep { loss, parameters: step_parameters(tensors) });
}

/// Records training step `step` of the run (0-based): its loss on this rank and the
/// values of `tensors` after it, the weights the optimizer steps.
pub fn record_training_step(step: usize, loss: Option<f64>, tensors: &[Tensor]) {
    if !enabled() {
        return;
    }
    record(event::TrainingStep { step, loss, parameters: step_parameters(tensors) });
}

/// Float values of each tensor (see [`event::StepParameter`]): its shape, its norm
/// and 16 values at evenly spaced positions.
pub fn step_parameters(tensors: &[Tensor]) -> Vec<event::StepParameter> {
    const SAMPLES: i64 = 16;
    tch::no_grad(|| {
        tensors
            .iter()
            .map(|t| {
                let flat = t.detach().to_device(tch::Device::Cpu).to_kind(Kind::Double).flatten(0, -1);
                let n = flat.numel() as i64;
                let k = SAMPLES.min(n);
                let samples = (0..k).map(|i| flat.double_value(&[i * n / k])).collect();
                event::StepParameter { shape: t.size(), norm: flat.norm().double_value(&[]), samples }
            })
            .collect()
    })
}

/// How many values of each parameter [`record_parameter_values`] keeps.
const SAMPLED_VALUES: i64 = 8;

/// Records every parameter of `named` after `epoch` in floats: its sum and
/// [`SAMPLED_VALUES`] of its values at evenly spaced flat positions (the checker
/// compares FSDP's gathered weights with DDP's to 1e-5 by them). `sharded`: the values
/// were all-gathered from shards.
pub fn record_parameter_values(epoch: usize, sharded: bool, named: &[(String, Tensor)]) {
    if !enabled() {
        return;
    }
    let mut parameters: Vec<event::ParameterSummary> = tch::no_grad(|| {
        named
            .iter()
            .map(|(name, t)| {
                let flat = t.detach().to_device(tch::Device::Cpu).to_kind(Kind::Double).flatten(0, -1);
                let numel = flat.size()[0];
                let picks = SAMPLED_VALUES.min(numel);
                let sample = (0..picks).map(|i| flat.double_value(&[i * numel / picks])).collect();
                let sum = flat.sum(Kind::Double).double_value(&[]);
                event::ParameterSummary { name: name.clone(), numel, sum, sample }
            })
            .collect()
    });
    parameters.sort_by(|a, b| a.name.cmp(&b.name));
    record(event::ParameterValues { epoch, sharded, parameters });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_tell_equal_from_nearly_equal() {
        let a = vec![Tensor::from_slice(&[1.0f32, 2.0, 3.0]), Tensor::from_slice(&[4.0f32])];
        let same = vec![Tensor::from_slice(&[1.0f32, 2.0, 3.0]), Tensor::from_slice(&[4.0f32])];
        let near = vec![Tensor::from_slice(&[1.0f32, 2.0, 3.000001]), Tensor::from_slice(&[4.0f32])];
        let fa = fingerprint(&a);
        assert_eq!(fa, fingerprint(&same));
        let fn_ = fingerprint(&near);
        assert_ne!(fa.digest, fn_.digest);
        for (x, y) in fa.projection.iter().zip(fn_.projection) {
            assert!((x - y).abs() < 1e-5, "{x} vs {y}");
        }
        // The split between tensors does not change the projection, only the values do.
        let merged = vec![Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0])];
        assert_eq!(fingerprint(&merged).projection, fa.projection);
    }

    // lab-trace's dtypes matched back, exhaustively too: a dtype added there fails to
    // compile here until tch has it.

    fn kind_back(dtype: lab_trace::Dtype) -> Kind {
        use lab_trace::Dtype as T;
        match dtype {
            T::Uint8 => Kind::Uint8,
            T::Int8 => Kind::Int8,
            T::Int16 => Kind::Int16,
            T::Int => Kind::Int,
            T::Int64 => Kind::Int64,
            T::Half => Kind::Half,
            T::Float => Kind::Float,
            T::Double => Kind::Double,
            T::ComplexHalf => Kind::ComplexHalf,
            T::ComplexFloat => Kind::ComplexFloat,
            T::ComplexDouble => Kind::ComplexDouble,
            T::Bool => Kind::Bool,
            T::QInt8 => Kind::QInt8,
            T::QUInt8 => Kind::QUInt8,
            T::QInt32 => Kind::QInt32,
            T::BFloat16 => Kind::BFloat16,
            T::Float8e5m2 => Kind::Float8e5m2,
            T::Float8e4m3fn => Kind::Float8e4m3fn,
            T::Float8e5m2fnuz => Kind::Float8e5m2fnuz,
            T::Float8e4m3fnuz => Kind::Float8e4m3fnuz,
        }
    }

    /// tch has no list of its kinds: lab-trace's every dtype is matched back to a kind,
    /// whose `Debug` text (the trace's spelling before it was typed) is the dtype's name.
    #[test]
    fn every_dtype_is_the_kind_of_its_name() {
        for &d in lab_trace::Dtype::ALL {
            let kind = kind_back(d);
            assert_eq!(format!("{kind:?}"), d.name());
            assert_eq!(dtype(kind), d);
        }
    }
}
