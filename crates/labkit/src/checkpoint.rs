//! Snapshots of a training run, and resuming from them (torchrun's snapshot pattern).
//!
//! Rank 0 writes, every `--save-every` epochs, into `--checkpoint-dir`:
//!
//! - `weights-epoch-NNNN.safetensors`: every variable of the model (parameters and
//!   BatchNorm running statistics), and with `--momentum` the optimizer's momentum
//!   buffers (named `optimizer/momentum_buffer/` and their parameter's name), in
//!   safetensors, which holds raw tensors and metadata only: loading it runs no code
//!   (unlike a pickle);
//! - `checkpoint.json`: the format, the epoch, the learning rate and momentum, the
//!   early-stopping history, the cumulative time, the weights file's name and its MD5.
//!
//! Both are written under a temporary name and renamed into place, weights first. The
//! rename of `checkpoint.json` is the commit: a process killed at any moment leaves the
//! previous `checkpoint.json` naming the previous, complete weights file (older weights
//! files are removed only after the commit).
//!
//! `--resume` makes every rank load the checkpoint, if there is one, into its own
//! model on its own device, and continue with the next epoch. Without a checkpoint it
//! starts from epoch 0, so one command line serves the first run and every restart.
//!
//! Step 12 does the same in sight, as PyTorch's tutorial does: rank 0 alone calls
//! [`write_checkpoint`] when [`checkpoint_due`], a barrier follows, and every rank then
//! calls [`load_checkpoint`] with its own device (PyTorch's `map_location`); at the
//! start, [`resume_after`] continues after a checkpoint loaded under `--resume`.
//! [`resume`] and [`save`] are the same steps for the programs of steps 0-11, out of
//! sight there.
//!
//! SGD without momentum (the DLI lab's, the default) keeps no per-parameter state: its
//! learning rate is stored as such, in format `ddp-lab-checkpoint/1`. With momentum
//! ([`crate::Sgd`], step 12 on) the buffers go into the weights file, so that they are
//! committed with the weights, and the format is `ddp-lab-checkpoint/2`: a program that
//! reads only `/1` refuses it as another format rather than resuming without the
//! buffers. A `/1` checkpoint is a plain-SGD run's whole state (its momentum is 0), so
//! it still loads; resuming with another momentum than the saved one is refused (it
//! would not continue the saved run, and `/1` holds no buffers to continue with).
use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;
use lab_trace::event;
use md5::{Digest, Md5};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tch::nn::VarStore;
use tch::{Device, Tensor};
use thiserror::Error;

use crate::data::fsutil;
use crate::error::{Failure, Result};
use crate::optim::Sgd;
use crate::report::EarlyStopping;
use crate::{probes, run, trace};

/// The file that commits a checkpoint.
pub const CHECKPOINT_FILE: &str = "checkpoint.json";
/// The `format` field of [`CHECKPOINT_FILE`] for plain SGD (no optimizer state).
pub const FORMAT: &str = "ddp-lab-checkpoint/1";
/// The `format` field with momentum: the weights file holds the momentum buffers too.
pub const FORMAT_WITH_MOMENTUM: &str = "ddp-lab-checkpoint/2";
/// What the name of a momentum buffer starts with in the weights file: a `/`, which no
/// VarStore name holds (tch joins paths with `.`).
pub const MOMENTUM_BUFFER_PREFIX: &str = "optimizer/momentum_buffer/";
pub use crate::probes::CRASH_IN_SAVE_ENV;

/// The checkpoint options of every step program (flattened into `RunOptions`, whose
/// `AsRef` hands them to [`resume`] and [`save`]).
#[derive(Args, Debug, Clone)]
pub struct CheckpointOptions {
    /// Rank 0 saves a checkpoint (weights, epoch, learning rate, early-stopping
    /// history) every N epochs into --checkpoint-dir. Default: never.
    #[arg(long, value_name = "N", value_parser = crate::parsers::positive)]
    pub save_every: Option<usize>,

    /// Where checkpoints are saved and resumed from (safetensors + checkpoint.json).
    #[arg(long, default_value = "checkpoints", value_name = "DIR")]
    pub checkpoint_dir: PathBuf,

    /// Continue from the checkpoint in --checkpoint-dir, if there is one (every rank
    /// loads it onto its own device); otherwise start at epoch 0. Safe to pass on the
    /// first run too, as torchrun restarts repeat the same command line.
    #[arg(long)]
    pub resume: bool,
}

impl AsRef<CheckpointOptions> for CheckpointOptions {
    fn as_ref(&self) -> &CheckpointOptions {
        self
    }
}

/// What can go wrong with a checkpoint. Every message names the file and the fix.
#[derive(Debug, Error)]
pub enum CheckpointError {
    #[error("cannot {action} {}: {source}", path.display())]
    /// A file could not be read or written.
    Io {
        /// What was being done, e.g. "create" or "read".
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        #[source]
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A checkpoint that cannot be resumed from.
    #[error(
        "checkpoint {} is unusable: {reason}. Remove the directory {} (or point --checkpoint-dir elsewhere) to start afresh, or run without --resume",
        path.display(), dir.display()
    )]
    Invalid {
        /// The checkpoint file.
        path: PathBuf,
        /// The checkpoint directory.
        dir: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    #[error("cannot write checkpoint {}: {source}", path.display())]
    /// The weights could not be saved.
    Tensor {
        /// The weights file.
        path: PathBuf,
        #[source]
        /// tch's error.
        source: tch::TchError,
    },
}

impl CheckpointError {
    fn invalid(path: &Path, reason: impl Into<String>) -> Self {
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        CheckpointError::Invalid { path: path.to_path_buf(), dir, reason: reason.into() }
    }

    fn io(action: &'static str, path: &Path, source: std::io::Error) -> Self {
        CheckpointError::Io { action, path: path.to_path_buf(), source }
    }
}

impl Failure for CheckpointError {
    /// 2 for a checkpoint that cannot be used (bad input), 1 for I/O failures.
    fn exit_code(&self) -> u8 {
        match self {
            CheckpointError::Invalid { .. } => 2,
            _ => 1,
        }
    }
}

/// Where a run starts: the first epoch to train and the time already spent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Start {
    /// `usize::MAX` when the saved run had already stopped early: `start.epoch..epochs`
    /// is then empty.
    pub epoch: usize,
    /// Seconds of training before the resumed epochs.
    pub total_time: f64,
}

/// The contents of [`CHECKPOINT_FILE`].
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// The last epoch trained (0-based); training resumes at `epoch + 1`.
    pub epoch: usize,
    /// Seconds of training up to and including `epoch`.
    pub total_time: f64,
    /// The learning rate the run trained with.
    pub learning_rate: f64,
    /// SGD's momentum (0: plain SGD, no buffers saved).
    pub momentum: f64,
    /// The validation accuracy of every epoch trained (epoch i at index i).
    pub accuracy_history: Vec<f64>,
    /// The weights file, relative to the checkpoint directory.
    pub weights: String,
    /// The MD5 of the weights file, checked before it is loaded.
    pub weights_md5: String,
}

/// [`CHECKPOINT_FILE`] as written: the fields of PyTorch's checkpoint dictionary a
/// resumed run needs, grouped as the lab's script names them.
#[derive(Serialize, Deserialize)]
struct CheckpointFile {
    format: String,
    epoch: usize,
    /// Where a resumed run starts (for people reading the file; `epoch + 1`).
    next_epoch: usize,
    total_time: f64,
    optimizer: OptimizerState,
    early_stopping: EarlyStoppingState,
    weights: String,
    weights_md5: String,
}

/// SGD's settings; its momentum buffers, if any, are in the weights file.
#[derive(Serialize, Deserialize)]
struct OptimizerState {
    kind: String,
    momentum: f64,
    learning_rate: f64,
}

#[derive(Serialize, Deserialize)]
struct EarlyStoppingState {
    accuracy_history: Vec<f64>,
}

impl Checkpoint {
    fn to_file(&self) -> CheckpointFile {
        CheckpointFile {
            format: if self.momentum == 0.0 { FORMAT } else { FORMAT_WITH_MOMENTUM }.into(),
            epoch: self.epoch,
            next_epoch: self.epoch + 1,
            total_time: self.total_time,
            optimizer: OptimizerState {
                kind: "sgd".into(),
                momentum: self.momentum,
                learning_rate: self.learning_rate,
            },
            early_stopping: EarlyStoppingState { accuracy_history: self.accuracy_history.clone() },
            weights: self.weights.clone(),
            weights_md5: self.weights_md5.clone(),
        }
    }

    fn from_json(path: &Path, v: Value) -> Result<Self, CheckpointError> {
        // The format first: another version's file is refused as such, not for a field.
        if v["format"] != FORMAT && v["format"] != FORMAT_WITH_MOMENTUM {
            return Err(CheckpointError::invalid(
                path,
                format!(
                    "its format is {}, this program reads {FORMAT} and {FORMAT_WITH_MOMENTUM}",
                    v["format"]
                ),
            ));
        }
        let file =
            CheckpointFile::deserialize(v).map_err(|e| CheckpointError::invalid(path, e.to_string()))?;
        Ok(Checkpoint {
            epoch: file.epoch,
            total_time: file.total_time,
            learning_rate: file.optimizer.learning_rate,
            momentum: file.optimizer.momentum,
            accuracy_history: file.early_stopping.accuracy_history,
            weights: file.weights,
            weights_md5: file.weights_md5,
        })
    }
}

/// A checkpoint directory that cannot be written (exit code 2, as bad input).
fn unusable(dir: &Path, action: &str, path: &Path, e: std::io::Error) -> CheckpointError {
    CheckpointError::invalid(dir, format!("cannot {action} {}: {e}", path.display()))
}

fn md5_of(path: &Path) -> Result<String, CheckpointError> {
    let bytes = fs::read(path).map_err(|e| CheckpointError::io("read", path, e))?;
    Ok(Md5::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect())
}

/// Writes a checkpoint of `vs` and the optimizer's `momentum_buffers` (by parameter
/// name, as [`crate::Sgd::momentum_buffers`] gives them) into `dir` atomically (see the
/// module documentation).
pub fn write(
    dir: &Path,
    vs: &VarStore,
    momentum_buffers: &[(String, Tensor)],
    checkpoint_fields: &Checkpoint,
) -> Result<Checkpoint, CheckpointError> {
    fsutil::create_dir(dir).map_err(|e| CheckpointError::invalid(dir, e.to_string()))?;
    fsutil::remove_stale_temp_files(dir);
    let mut checkpoint = checkpoint_fields.clone();
    checkpoint.weights = format!("weights-epoch-{:04}.safetensors", checkpoint.epoch);
    // Sorted names, CPU tensors: the same bytes whatever the rank's device.
    let variables: BTreeMap<String, Tensor> = vs
        .variables()
        .into_iter()
        .chain(
            momentum_buffers.iter().map(|(k, v)| (format!("{MOMENTUM_BUFFER_PREFIX}{k}"), v.shallow_clone())),
        )
        .map(|(k, v)| (k, v.to_device(Device::Cpu)))
        .collect();
    let named: Vec<(&str, &Tensor)> = variables.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let weights_path = dir.join(&checkpoint.weights);
    let tmp =
        fsutil::writer().create(&weights_path).map_err(|e| unusable(dir, "create", &weights_path, e))?;
    let tmp_path = tmp.path().to_path_buf();
    Tensor::write_safetensors(&named, &tmp_path)
        .map_err(|source| CheckpointError::Tensor { path: tmp_path.clone(), source })?;
    checkpoint.weights_md5 = md5_of(&tmp_path)?;
    tmp.commit().map_err(|e| unusable(dir, "rename into place", &weights_path, e))?;

    let text = serde_json::to_string_pretty(&checkpoint.to_file()).expect("JSON of plain values");
    let json_path = dir.join(CHECKPOINT_FILE);
    let mut tmp = fsutil::writer().create(&json_path).map_err(|e| unusable(dir, "create", &json_path, e))?;
    let tmp_path = tmp.path().to_path_buf();
    tmp.file().write_all(text.as_bytes()).map_err(|e| CheckpointError::io("write", &tmp_path, e))?;
    probes::in_checkpoint_commit(checkpoint.epoch);
    tmp.commit().map_err(|e| unusable(dir, "rename into place", &json_path, e))?;
    // Committed: older weights are no longer referenced.
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            if name.starts_with("weights-epoch-")
                && name.ends_with(".safetensors")
                && name != checkpoint.weights
            {
                let _ = fs::remove_file(entry.path());
            }
        }
    }
    Ok(checkpoint)
}

/// Reads `dir`'s checkpoint, if there is one, checking the weights file's MD5.
pub fn read(dir: &Path) -> Result<Option<Checkpoint>, CheckpointError> {
    let path = dir.join(CHECKPOINT_FILE);
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(CheckpointError::io("read", &path, e)),
    };
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| CheckpointError::invalid(&path, format!("it is not valid JSON ({e})")))?;
    let checkpoint = Checkpoint::from_json(&path, value)?;
    let weights = dir.join(&checkpoint.weights);
    if !weights.is_file() {
        return Err(CheckpointError::invalid(&weights, "the weights file it names is missing"));
    }
    let md5 = md5_of(&weights)?;
    if md5 != checkpoint.weights_md5 {
        return Err(CheckpointError::invalid(
            &weights,
            format!(
                "its MD5 is {md5}, the checkpoint recorded {} (corrupt or truncated)",
                checkpoint.weights_md5
            ),
        ));
    }
    Ok(Some(checkpoint))
}

/// Copies the checkpoint's weights into `vs`: the saved tensors are loaded onto
/// `device` first (PyTorch's `map_location`), then copied into the model. The names and
/// shapes must match the model exactly (same `--width`). For a program whose SGD has no
/// momentum: a checkpoint saved with momentum is refused (see [`load_state`]).
pub fn load_weights(
    dir: &Path,
    checkpoint: &Checkpoint,
    vs: &VarStore,
    device: Device,
) -> Result<(), CheckpointError> {
    load_state(dir, checkpoint, vs, None, device)
}

/// [`load_weights`], and the momentum buffers into `optimizer` (PyTorch's
/// `optimizer.load_state_dict`), replacing its own. The optimizer's momentum (0 without
/// one) must be the saved run's: another would not continue it.
pub fn load_state(
    dir: &Path,
    checkpoint: &Checkpoint,
    vs: &VarStore,
    optimizer: Option<&mut Sgd>,
    device: Device,
) -> Result<(), CheckpointError> {
    let momentum = optimizer.as_ref().map_or(0.0, |o| o.momentum());
    if checkpoint.momentum != momentum {
        return Err(CheckpointError::invalid(
            &dir.join(CHECKPOINT_FILE),
            format!(
                "it was saved by SGD with --momentum {}, this run's has momentum {momentum}, which would not continue the saved run: resume with --momentum {} (the option exists from step 12 on)",
                checkpoint.momentum, checkpoint.momentum
            ),
        ));
    }
    let path = dir.join(&checkpoint.weights);
    let mut saved: HashMap<String, Tensor> = Tensor::read_safetensors(&path)
        .map_err(|e| CheckpointError::invalid(&path, format!("it is not a readable safetensors file ({e})")))?
        .into_iter()
        .map(|(name, tensor)| (name, tensor.to_device(device)))
        .collect();
    let buffer_names: Vec<String> =
        saved.keys().filter(|k| k.starts_with(MOMENTUM_BUFFER_PREFIX)).cloned().collect();
    let buffers: Vec<(String, Tensor)> = buffer_names
        .into_iter()
        .map(|k| {
            let tensor = saved.remove(&k).expect("a listed name");
            (k[MOMENTUM_BUFFER_PREFIX.len()..].to_string(), tensor)
        })
        .collect();
    load_variables(&path, saved, vs)?;
    if let Some(optimizer) = optimizer {
        optimizer
            .restore_momentum_buffers(buffers)
            .map_err(|reason| CheckpointError::invalid(&path, reason))?;
    }
    Ok(())
}

/// Copies `saved` into `vs`, whose names and shapes it must hold exactly.
fn load_variables(path: &Path, saved: HashMap<String, Tensor>, vs: &VarStore) -> Result<(), CheckpointError> {
    let path = path.to_path_buf();
    let variables = vs.variables();
    let mut missing: Vec<&String> = variables.keys().filter(|k| !saved.contains_key(*k)).collect();
    missing.sort();
    let mut extra: Vec<&String> = saved.keys().filter(|k| !variables.contains_key(*k)).collect();
    extra.sort();
    if !missing.is_empty() || !extra.is_empty() {
        return Err(CheckpointError::invalid(
            &path,
            format!(
                "it holds a different model (missing {missing:?}, unexpected {extra:?}): was it saved with another --width?"
            ),
        ));
    }
    tch::no_grad(|| {
        for (name, mut var) in variables {
            let src = &saved[&name];
            if src.size() != var.size() {
                return Err(CheckpointError::invalid(
                    &path,
                    format!(
                        "{name} has shape {:?}, the model's is {:?}: was it saved with another --width?",
                        src.size(),
                        var.size()
                    ),
                ));
            }
            var.f_copy_(src).map_err(|e| CheckpointError::invalid(&path, format!("copying {name}: {e}")))?;
        }
        Ok(())
    })
}

/// `--resume`: loads the last checkpoint of `--checkpoint-dir` into `vs` (on every
/// rank, onto that rank's device) and `early_stopping`, and says where to start.
/// Without `--resume`, or without a checkpoint yet, starts at epoch 0.
///
/// ```
/// use labkit::{CheckpointOptions, EarlyStopping, TrainingState};
/// use tch::nn::{self, VarStore};
///
/// let dir = std::env::temp_dir().join(format!("labkit-doc-resume-{}", std::process::id()));
/// let options = CheckpointOptions { save_every: Some(1), checkpoint_dir: dir.clone(), resume: true };
/// let vs = VarStore::new(tch::Device::Cpu);
/// let _layer = nn::linear(vs.root() / "fc", 4, 2, Default::default());
/// let mut early_stopping = EarlyStopping::new(0.9, 2);
///
/// // Nothing saved yet: start at epoch 0.
/// assert_eq!(labkit::resume(&options, &vs, &mut early_stopping)?.epoch, 0);
/// early_stopping.record(0.8);
/// let state =
///     TrainingState { epoch: 0, total_time: 1.5, learning_rate: 0.1, early_stopping: &early_stopping };
/// labkit::save_checkpoint(&options, &vs, state)?;
/// // A restart continues after the saved epoch.
/// let start = labkit::resume(&options, &vs, &mut EarlyStopping::new(0.9, 2))?;
/// assert_eq!((start.epoch, start.total_time), (1, 1.5));
/// # std::fs::remove_dir_all(dir)?;
/// # Ok::<(), labkit::BoxError>(())
/// ```
pub fn resume(
    options: &impl AsRef<CheckpointOptions>,
    vs: &VarStore,
    early_stopping: &mut EarlyStopping,
) -> Result<Start> {
    let options = options.as_ref();
    let fresh = Start { epoch: 0, total_time: 0.0 };
    if !options.resume {
        return Ok(fresh);
    }
    let dir = &options.checkpoint_dir;
    let Some(checkpoint) = read(dir)? else {
        if run::is_rank_zero() {
            println!("resume: no checkpoint in {} yet, starting at epoch 0", dir.display());
        }
        return Ok(fresh);
    };
    load_weights(dir, &checkpoint, vs, vs.device())?;
    early_stopping.restore(&checkpoint.accuracy_history);
    crate::report::restore(&checkpoint.accuracy_history, checkpoint.total_time);
    if early_stopping.should_stop() {
        // The saved run had already stopped early: another epoch would change its result.
        if run::is_rank_zero() {
            println!(
                "resume: the run saved in {} had already stopped early after epoch {} (target reached); nothing left to train",
                dir.display(),
                checkpoint.epoch
            );
        }
        return Ok(Start { epoch: usize::MAX, total_time: checkpoint.total_time });
    }
    let start = Start { epoch: checkpoint.epoch + 1, total_time: checkpoint.total_time };
    run::continue_at(start.epoch);
    if run::is_rank_zero() {
        println!(
            "resume: continuing at epoch {} from {} (saved after epoch {})",
            start.epoch,
            dir.join(&checkpoint.weights).display(),
            checkpoint.epoch
        );
    }
    if trace::enabled() {
        // The same fingerprint as the trainer's "weights" events (trainable variables).
        let digest = trace::fingerprint(&vs.trainable_variables()).digest;
        trace::record(event::Resumed { epoch: start.epoch, weights: checkpoint.weights.clone(), digest });
    }
    Ok(start)
}

impl Start {
    /// A run that starts at epoch 0.
    pub const FRESH: Start = Start { epoch: 0, total_time: 0.0 };
}

/// Every rank's half of a checkpoint: loads the last checkpoint of `--checkpoint-dir`
/// into `vs` and `optimizer` (its momentum buffers, if it has momentum), its tensors
/// loaded onto `device` first (PyTorch's `map_location`: pass this rank's own device,
/// or every rank stages the whole model on the device it was saved from). `None` when
/// the directory holds no checkpoint yet. An error when the checkpoint was saved with
/// another momentum than `optimizer`'s.
///
/// Call it only once the checkpoint is whole: after the barrier that follows rank 0's
/// [`write_checkpoint`], or at the start of a restarted job.
///
/// ```
/// use labkit::{CheckpointOptions, EarlyStopping, TrainingState};
/// use tch::{nn::{self, VarStore}, Device};
///
/// let dir = std::env::temp_dir().join(format!("labkit-doc-load-{}", std::process::id()));
/// let options = CheckpointOptions { save_every: Some(1), checkpoint_dir: dir.clone(), resume: true };
/// let vs = VarStore::new(Device::Cpu);
/// let _layer = nn::linear(vs.root() / "fc", 4, 2, Default::default());
/// let mut optimizer = labkit::Sgd::new(&vs, 0.1, 0.9)?;
/// let mut early_stopping = EarlyStopping::new(0.9, 2);
/// assert!(labkit::load_checkpoint(&options, &vs, &mut optimizer, Device::Cpu)?.is_none(), "nothing saved yet");
///
/// early_stopping.record(0.8);
/// let state =
///     TrainingState { epoch: 0, total_time: 1.5, learning_rate: 0.1, early_stopping: &early_stopping };
/// if labkit::checkpoint_due(&options, state.epoch) {
///     labkit::write_checkpoint(&options, &vs, &optimizer, state)?; // rank 0 only, then a barrier
/// }
/// let checkpoint = labkit::load_checkpoint(&options, &vs, &mut optimizer, Device::Cpu)?;
/// let start = labkit::resume_after(checkpoint.as_ref(), &mut EarlyStopping::new(0.9, 2));
/// assert_eq!((start.epoch, start.total_time), (1, 1.5));
/// # std::fs::remove_dir_all(dir)?;
/// # Ok::<(), labkit::BoxError>(())
/// ```
pub fn load_checkpoint(
    options: &impl AsRef<CheckpointOptions>,
    vs: &VarStore,
    optimizer: &mut Sgd,
    device: Device,
) -> Result<Option<Checkpoint>> {
    let dir = &options.as_ref().checkpoint_dir;
    // Before any file is opened: the checker compares when each rank began reading
    // with when rank 0's checkpoint became whole (step 12's barrier).
    trace::record(event::LoadCheckpoint {
        dir: dir.to_string_lossy().into_owned(),
        device: format!("{device:?}"),
        model_device: format!("{:?}", vs.device()),
    });
    let Some(checkpoint) = read(dir)? else { return Ok(None) };
    load_state(dir, &checkpoint, vs, Some(optimizer), device)?;
    if trace::enabled() {
        let digest = trace::fingerprint(&vs.trainable_variables()).digest;
        trace::record(event::CheckpointLoaded {
            epoch: checkpoint.epoch,
            weights: checkpoint.weights.clone(),
            digest,
        });
    }
    Ok(Some(checkpoint))
}

/// Where a run continues after `checkpoint` (loaded by [`load_checkpoint`] under
/// `--resume`): the epoch after it, with its early-stopping history and time restored;
/// epoch 0 without one. See [`load_checkpoint`] for an example.
pub fn resume_after(checkpoint: Option<&Checkpoint>, early_stopping: &mut EarlyStopping) -> Start {
    let Some(checkpoint) = checkpoint else {
        if run::is_rank_zero() {
            println!("resume: no checkpoint yet, starting at epoch 0");
        }
        return Start::FRESH;
    };
    early_stopping.restore(&checkpoint.accuracy_history);
    crate::report::restore(&checkpoint.accuracy_history, checkpoint.total_time);
    if early_stopping.should_stop() {
        if run::is_rank_zero() {
            println!(
                "resume: the saved run had already stopped early after epoch {} (target reached); nothing left to train",
                checkpoint.epoch
            );
        }
        return Start { epoch: usize::MAX, total_time: checkpoint.total_time };
    }
    let start = Start { epoch: checkpoint.epoch + 1, total_time: checkpoint.total_time };
    run::continue_at(start.epoch);
    if run::is_rank_zero() {
        println!("resume: continuing at epoch {} (saved after epoch {})", start.epoch, checkpoint.epoch);
    }
    start
}

/// Whether `--save-every N` asks for a checkpoint after `epoch` (0-based): N divides the
/// number of epochs done. Never without `--save-every`.
pub fn checkpoint_due(options: &impl AsRef<CheckpointOptions>, epoch: usize) -> bool {
    options.as_ref().save_every.is_some_and(|every| (epoch + 1).is_multiple_of(every))
}

/// Writes a checkpoint of `vs`, `optimizer` (its momentum and momentum buffers) and
/// `state` into `--checkpoint-dir` now, atomically (see the module documentation),
/// whichever rank calls it: the lab calls it on rank 0 only, as every rank holds the
/// same weights and buffers. See [`load_checkpoint`] for an example.
pub fn write_checkpoint(
    options: &impl AsRef<CheckpointOptions>,
    vs: &VarStore,
    optimizer: &Sgd,
    state: TrainingState<'_>,
) -> Result<()> {
    let dir = &options.as_ref().checkpoint_dir;
    trace::record(event::SaveCheckpoint { epoch: state.epoch, dir: dir.to_string_lossy().into_owned() });
    probes::before_saving_checkpoint();
    let fields = Checkpoint {
        epoch: state.epoch,
        total_time: state.total_time,
        learning_rate: state.learning_rate,
        momentum: optimizer.momentum(),
        accuracy_history: state.early_stopping.history().to_vec(),
        weights: String::new(),
        weights_md5: String::new(),
    };
    let saved = write(dir, vs, &optimizer.momentum_buffers(), &fields)?;
    trace::record(event::CheckpointSaved {
        epoch: state.epoch,
        weights: saved.weights,
        md5: saved.weights_md5,
    });
    Ok(())
}

/// Where training stands after an epoch: what [`save`] records besides the weights (the
/// fields of PyTorch's `torch.save({"epoch": ..., ...})` checkpoint dictionary). No
/// `Default`: every field is the run's own.
#[derive(Debug, Clone, Copy)]
pub struct TrainingState<'a> {
    /// The epoch just finished (0-based).
    pub epoch: usize,
    /// Seconds of training so far, this epoch included.
    pub total_time: f64,
    /// The optimizer's learning rate (its momentum and buffers, if any, are the
    /// optimizer's: [`write_checkpoint`] takes it).
    pub learning_rate: f64,
    /// The early stop, whose accuracy history the checkpoint keeps.
    pub early_stopping: &'a EarlyStopping,
}

/// Rank 0 saves a checkpoint after `state.epoch` when `--save-every N` divides the
/// number of epochs done; every other rank, and runs without `--save-every`, do nothing.
/// See [`resume`] for an example.
pub fn save(options: &impl AsRef<CheckpointOptions>, vs: &VarStore, state: TrainingState<'_>) -> Result<()> {
    let TrainingState { epoch, total_time, learning_rate, early_stopping } = state;
    let options = options.as_ref();
    let Some(every) = options.save_every else { return Ok(()) };
    if !(epoch + 1).is_multiple_of(every) || !run::is_rank_zero() {
        return Ok(());
    }
    let fields = Checkpoint {
        epoch,
        total_time,
        learning_rate,
        momentum: 0.0,
        accuracy_history: early_stopping.history().to_vec(),
        weights: String::new(),
        weights_md5: String::new(),
    };
    // The programs of steps 0-11 train with tch's plain SGD: no optimizer state.
    let saved = write(&options.checkpoint_dir, vs, &[], &fields)?;
    trace::record(event::CheckpointSaved { epoch, weights: saved.weights, md5: saved.weights_md5 });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::nn;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("labkit-ckpt-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    fn model(seed: i64, width: usize) -> VarStore {
        tch::manual_seed(seed);
        let vs = VarStore::new(Device::Cpu);
        let _ = nn::linear(vs.root() / "fc", 4, width as i64, Default::default());
        let _ = nn::batch_norm1d(vs.root() / "bn", width as i64, Default::default());
        vs
    }

    fn fields(epoch: usize) -> Checkpoint {
        Checkpoint {
            epoch,
            total_time: 12.5,
            learning_rate: 0.01,
            momentum: 0.0,
            accuracy_history: vec![0.5, 0.75],
            weights: String::new(),
            weights_md5: String::new(),
        }
    }

    fn same(a: &VarStore, b: &VarStore) -> bool {
        let (a, b) = (a.variables(), b.variables());
        a.len() == b.len() && a.iter().all(|(k, v)| v.equal(&b[k]))
    }

    #[test]
    fn round_trip_restores_every_variable_and_field() {
        let _rng = crate::torch_rng_lock();
        let dir = scratch("round-trip");
        assert_eq!(read(&dir).unwrap(), None, "no checkpoint yet");
        let saved = model(1, 3);
        let written = write(&dir, &saved, &[], &fields(4)).unwrap();
        assert_eq!(written.weights, "weights-epoch-0004.safetensors");
        let back = read(&dir).unwrap().expect("a checkpoint");
        assert_eq!(back, written);
        assert_eq!(
            (back.epoch, back.learning_rate, back.accuracy_history.clone()),
            (4, 0.01, vec![0.5, 0.75])
        );
        let other = model(2, 3);
        assert!(!same(&saved, &other));
        load_weights(&dir, &back, &other, Device::Cpu).unwrap();
        assert!(same(&saved, &other), "weights and BatchNorm statistics restored");
        // A newer checkpoint replaces the older weights file after its commit.
        write(&dir, &saved, &[], &fields(5)).unwrap();
        let names: Vec<String> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .collect();
        assert!(names.contains(&"weights-epoch-0005.safetensors".to_string()), "{names:?}");
        assert!(!names.contains(&"weights-epoch-0004.safetensors".to_string()), "{names:?}");
        let _ = fs::remove_dir_all(&dir);
    }

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        run: CheckpointOptions,
    }

    fn resume_options(dir: &Path) -> CheckpointOptions {
        use clap::Parser;
        let dir = dir.to_str().unwrap();
        Cli::try_parse_from(["lab", "--resume", "--save-every", "1", "--checkpoint-dir", dir]).unwrap().run
    }

    #[test]
    fn resume_continues_after_the_saved_epoch_unless_the_run_had_stopped_early() {
        let _rng = crate::torch_rng_lock();
        let dir = scratch("early-stop");
        let run = resume_options(&dir);
        let saved = model(1, 3);
        // Not finished: history [0.5, 0.75] is below the target 0.9.
        write(&dir, &saved, &[], &fields(4)).unwrap();
        let mut early_stopping = EarlyStopping::new(0.9, 2);
        let start = resume(&run, &model(2, 3), &mut early_stopping).unwrap();
        assert_eq!(start, Start { epoch: 5, total_time: 12.5 });
        assert_eq!(early_stopping.history(), &[0.5, 0.75]);
        // Stopped early: both accuracies reached 0.5, patience 2.
        let mut early_stopping = EarlyStopping::new(0.5, 2);
        let start = resume(&run, &model(2, 3), &mut early_stopping).unwrap();
        assert!((start.epoch..10).is_empty(), "trains again after an early stop: {start:?}");
        assert_eq!(start.total_time, 12.5);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn damaged_or_foreign_checkpoints_are_refused_with_the_file_and_the_fix() {
        let _rng = crate::torch_rng_lock();
        let dir = scratch("damaged");
        let saved = model(1, 3);
        let written = write(&dir, &saved, &[], &fields(0)).unwrap();
        // Another width: names match, shapes do not.
        let wider = model(1, 5);
        let e = load_weights(&dir, &written, &wider, Device::Cpu).unwrap_err();
        assert!(e.to_string().contains("--width") && e.exit_code() == 2, "{e}");
        // Truncated weights: the MD5 catches it.
        let w = dir.join(&written.weights);
        let bytes = fs::read(&w).unwrap();
        fs::write(&w, &bytes[..bytes.len() / 2]).unwrap();
        let e = read(&dir).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("weights-epoch-0000.safetensors") && msg.contains("corrupt or truncated"),
            "{msg}"
        );
        assert!(msg.contains("without --resume"), "{msg}");
        // A JSON that is not a checkpoint.
        fs::write(dir.join(CHECKPOINT_FILE), "{\"format\": \"pickle\"}").unwrap();
        let e = read(&dir).unwrap_err();
        assert!(e.to_string().contains("checkpoint.json") && e.to_string().contains("format"), "{e}");
        // Ours, with a field missing: named, not taken as zero.
        let mut file: Value = serde_json::to_value(written.to_file()).unwrap();
        file.as_object_mut().unwrap().remove("total_time");
        fs::write(dir.join(CHECKPOINT_FILE), file.to_string()).unwrap();
        let e = read(&dir).unwrap_err();
        assert!(
            e.to_string().contains("checkpoint.json") && e.to_string().contains("missing field `total_time`"),
            "{e}"
        );
        assert_eq!(e.exit_code(), 2);
        let _ = fs::remove_dir_all(&dir);
    }

    /// A model and its SGD with `momentum` after two steps on a fixed batch (buffers
    /// that are not the last gradient alone).
    fn trained(seed: i64, momentum: f64) -> (VarStore, Sgd) {
        use crate::optim::Optimizer;
        use tch::nn::Module;
        tch::manual_seed(seed);
        let vs = VarStore::new(Device::Cpu);
        let layer = nn::linear(vs.root() / "fc", 4, 3, Default::default());
        let mut optimizer = Sgd::new(&vs, 0.1, momentum).unwrap();
        for step in 1..=2 {
            optimizer.zero_grad();
            let x = Tensor::arange(8, tch::kind::FLOAT_CPU).reshape([2, 4]) * step as f64;
            layer.forward(&x).square().sum(tch::Kind::Float).backward();
            optimizer.step();
        }
        (vs, optimizer)
    }

    fn same_buffers(a: &Sgd, b: &Sgd) -> bool {
        let (a, b) = (a.momentum_buffers(), b.momentum_buffers());
        a.len() == b.len() && a.iter().zip(&b).all(|((n, x), (m, y))| n == m && x.equal(y))
    }

    #[test]
    fn momentum_buffers_are_saved_with_the_weights_and_restored() {
        let _rng = crate::torch_rng_lock();
        let dir = scratch("momentum");
        let (saved_vs, saved_optimizer) = trained(1, 0.9);
        assert_eq!(saved_optimizer.momentum_buffers().len(), 2);
        let fields = Checkpoint { momentum: 0.9, ..fields(3) };
        let written = write(&dir, &saved_vs, &saved_optimizer.momentum_buffers(), &fields).unwrap();
        let json: Value =
            serde_json::from_str(&fs::read_to_string(dir.join(CHECKPOINT_FILE)).unwrap()).unwrap();
        assert_eq!(json["format"], FORMAT_WITH_MOMENTUM);
        assert_eq!(json["optimizer"]["momentum"], 0.9);
        let back = read(&dir).unwrap().expect("a checkpoint");
        assert_eq!(back, written);
        // Another model and optimizer, with buffers of their own, get the saved ones.
        let (vs, mut optimizer) = trained(2, 0.9);
        assert!(!same(&saved_vs, &vs) && !same_buffers(&saved_optimizer, &optimizer));
        load_state(&dir, &back, &vs, Some(&mut optimizer), Device::Cpu).unwrap();
        assert!(same(&saved_vs, &vs), "weights restored");
        assert!(same_buffers(&saved_optimizer, &optimizer), "momentum buffers restored");
        // The buffers are the optimizer's, not the model's: the weights load alone only
        // into a run with the same momentum.
        let e = load_weights(&dir, &back, &vs, Device::Cpu).unwrap_err();
        assert!(e.to_string().contains("--momentum 0.9") && e.exit_code() == 2, "{e}");
        let (vs, mut other) = trained(2, 0.5);
        let e = load_state(&dir, &back, &vs, Some(&mut other), Device::Cpu).unwrap_err();
        assert!(e.to_string().contains("--momentum 0.9") && e.exit_code() == 2, "{e}");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_checkpoint_from_before_momentum_loads_as_plain_sgds() {
        let _rng = crate::torch_rng_lock();
        let dir = scratch("format-1");
        fs::create_dir_all(&dir).unwrap();
        // Written by hand as the program before momentum wrote it.
        let (saved_vs, _) = trained(1, 0.0);
        let variables: BTreeMap<String, Tensor> = saved_vs.variables().into_iter().collect();
        let named: Vec<(&str, &Tensor)> = variables.iter().map(|(k, v)| (k.as_str(), v)).collect();
        let weights = dir.join("weights-epoch-0001.safetensors");
        Tensor::write_safetensors(&named, &weights).unwrap();
        let md5 = md5_of(&weights).unwrap();
        let json = format!(
            r#"{{"format": "ddp-lab-checkpoint/1", "epoch": 1, "next_epoch": 2, "total_time": 3.0,
                "optimizer": {{"kind": "sgd", "momentum": 0.0, "learning_rate": 0.01}},
                "early_stopping": {{"accuracy_history": [0.5, 0.6]}},
                "weights": "weights-epoch-0001.safetensors", "weights_md5": "{md5}"}}"#
        );
        fs::write(dir.join(CHECKPOINT_FILE), json).unwrap();
        let back = read(&dir).unwrap().expect("a checkpoint");
        assert_eq!((back.epoch, back.momentum), (1, 0.0));
        let (vs, mut optimizer) = trained(2, 0.0);
        load_state(&dir, &back, &vs, Some(&mut optimizer), Device::Cpu).unwrap();
        assert!(same(&saved_vs, &vs));
        // With momentum: refused, naming the momentum it was saved with, not a zero
        // buffer that would pass for the saved run's state.
        let (vs, mut optimizer) = trained(2, 0.9);
        let e = load_state(&dir, &back, &vs, Some(&mut optimizer), Device::Cpu).unwrap_err();
        assert!(e.to_string().contains("--momentum 0") && e.to_string().contains("checkpoint.json"), "{e}");
        // Plain SGD still writes this format, byte for byte the same fields.
        write(&dir, &saved_vs, &[], &fields(1)).unwrap();
        let json: Value =
            serde_json::from_str(&fs::read_to_string(dir.join(CHECKPOINT_FILE)).unwrap()).unwrap();
        assert_eq!(
            (json["format"].as_str(), json["optimizer"]["momentum"].as_f64()),
            (Some(FORMAT), Some(0.0))
        );
        let _ = fs::remove_dir_all(&dir);
    }
}
