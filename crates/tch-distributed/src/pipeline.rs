//! Pipeline parallelism with GPipe's schedule: a model cut into stages, one per rank,
//! as PyTorch's `torch.distributed.pipelining.ScheduleGPipe` runs them.
//!
//! Rank s holds stage s only (its parameters, gradients and optimizer state). A
//! training step splits the batch into micro-batches: every micro-batch's forward runs
//! through the stages in turn, each stage [`send`](crate::ProcessGroup::send)ing its
//! activations to the next, then every micro-batch's backward runs back through them,
//! each stage sending the gradient of its input to the one before. Gradients accumulate
//! over the micro-batches, so after the step each stage holds the gradient of the whole
//! batch's mean loss, as the uncut model would.
//!
//! The price is the bubble: while the first micro-batch travels forward the later stages
//! wait, and the earlier ones wait while the backward travels back. With n stages and m
//! micro-batches GPipe idles each stage for (n − 1) / (m + n − 1) of the step
//! ([`PipelineStep::ideal_bubble`]); [`PipelineStep::bubble`] is the share this rank
//! measured. More micro-batches, smaller bubble.
//!
//! ```no_run
//! use tch::nn::{self, OptimizerConfig};
//! use tch::{Device, Kind, Tensor};
//! use tch_distributed as dist;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! dist::init_process_group(dist::Backend::Gloo, dist::InitOptions::default())?;
//! let (rank, world) = (dist::get_rank()?, dist::get_world_size()?); // 2 ranks: 2 stages
//! let vs = nn::VarStore::new(Device::Cpu);
//! let stage = if rank == 0 {
//!     nn::seq_t().add(nn::linear(vs.root() / "fc1", 784, 256, Default::default())).add_fn(|x| x.relu())
//! } else {
//!     nn::seq_t().add(nn::linear(vs.root() / "fc2", 256, 10, Default::default()))
//! };
//! let pipeline = dist::Pipeline::new(stage, dist::default_group()?, 4)?;
//! let mut opt = nn::Sgd::default().build(&vs, 0.01)?;
//! let images = Tensor::rand([32, 784], (Kind::Float, Device::Cpu)); // read by the first stage
//! let labels = Tensor::randint(10, [32], (Kind::Int64, Device::Cpu)); // read by the last
//! opt.zero_grad();
//! let step = pipeline.train_step(&images, &labels, |logits, y| logits.cross_entropy_for_logits(y))?;
//! opt.step();
//! if let Some(loss) = step.loss {
//!     println!("loss {loss:.3}, bubble {:.0}%", 100.0 * step.bubble());
//! }
//! # Ok(()) }
//! ```
use std::sync::Arc;
use std::time::{Duration, Instant};

use tch::nn::ModuleT;
use tch::{Device, Kind, Tensor};

use crate::error::{DistError, Result};
use crate::group::{ProcessGroup, Work};

/// Dimensions an activation may have (the shape travels ahead of the data).
const MAX_DIMS: usize = 8;

/// One stage of a pipeline: this rank's part of the model.
pub struct Pipeline<M> {
    stage: M,
    group: Arc<ProcessGroup>,
    micro_batches: usize,
}

/// What one [`Pipeline::train_step`] did on this rank.
#[derive(Debug, Clone, PartialEq)]
pub struct PipelineStep {
    /// The batch's mean loss (the mean of the micro-batches' mean losses): on the last
    /// stage only.
    pub loss: Option<f64>,
    /// This stage's number (its rank) and the number of stages.
    pub stage: usize,
    /// The number of stages.
    pub stages: usize,
    /// Micro-batches the batch was split into.
    pub micro_batches: usize,
    /// Time this stage spent computing (its forwards and backwards).
    pub busy: Duration,
    /// The whole step on this rank, from its start to the last send's completion
    /// (a rank that starts the step before the others counts the wait as idle: start
    /// them together, e.g. after a barrier, to measure the schedule alone).
    pub total: Duration,
}

impl PipelineStep {
    /// The measured share of the step this stage was not computing: waiting for
    /// activations or gradients, or sending them.
    pub fn bubble(&self) -> f64 {
        if self.total.is_zero() {
            return 0.0;
        }
        1.0 - self.busy.as_secs_f64() / self.total.as_secs_f64()
    }

    /// GPipe's idle share for equal stages and free communication:
    /// (stages − 1) / (micro-batches + stages − 1).
    pub fn ideal_bubble(&self) -> f64 {
        (self.stages - 1) as f64 / (self.micro_batches + self.stages - 1) as f64
    }
}

impl<M: ModuleT> Pipeline<M> {
    /// Stage `group.rank()` of `group.world_size()`, running `micro_batches` per step.
    /// Every rank of the group calls it (it checks, with one all-gather, that every
    /// stage splits its batches into the same number of micro-batches: otherwise they
    /// would send and receive different numbers of messages and fall out of step).
    pub fn new(stage: M, group: Arc<ProcessGroup>, micro_batches: usize) -> Result<Self> {
        if micro_batches == 0 {
            return Err(DistError::invalid("a pipeline needs at least 1 micro-batch per step"));
        }
        if group.world_size() > 1 {
            let mine = Tensor::from_slice(&[micro_batches as i64]);
            let all: Vec<i64> = group.all_gather_to_vec(&mine)?.iter().map(|t| t.int64_value(&[0])).collect();
            if all.iter().any(|&m| m != micro_batches as i64) {
                let each: Vec<String> =
                    all.iter().enumerate().map(|(r, m)| format!("stage {r}: {m}")).collect();
                return Err(DistError::invalid(format!(
                    "pipeline: the stages split each batch into different numbers of micro-batches ({}): every rank must pass the same micro_batches (--micro-batches), or their sends and receives do not pair up",
                    each.join(", ")
                )));
            }
        }
        Ok(Pipeline { stage, group, micro_batches })
    }

    /// This rank's stage.
    pub fn stage(&self) -> &M {
        &self.stage
    }

    /// Micro-batches per training step.
    pub fn micro_batches(&self) -> usize {
        self.micro_batches
    }

    /// One training step with GPipe's schedule: all forwards, then all backwards. The
    /// first stage reads `input` (the whole batch), the last reads `targets` and computes
    /// `loss_fn(output, targets)` per micro-batch (a mean over it); the other ranks' may
    /// be anything (e.g. empty tensors). Gradients accumulate into the stage's
    /// parameters: zero them before, step the optimizer after.
    pub fn train_step(
        &self,
        input: &Tensor,
        targets: &Tensor,
        loss_fn: impl Fn(&Tensor, &Tensor) -> Tensor,
    ) -> Result<PipelineStep> {
        let (stage, stages) = (self.group.rank(), self.group.world_size());
        let (first, last) = (stage == 0, stage + 1 == stages);
        let m = self.micro_batches as i64;
        let split = |t: &Tensor, what: &str| -> Result<Vec<Tensor>> {
            let rows = t.size().first().copied().unwrap_or(0);
            if rows < m || rows % m != 0 {
                return Err(DistError::invalid(format!(
                    "pipeline: the {what} has {rows} rows, which {m} micro-batches cannot share equally: make the batch a multiple of {m}"
                )));
            }
            Ok(t.chunk(m, 0))
        };
        let inputs = if first { split(input, "input")? } else { Vec::new() };
        let labels = if last { split(targets, "targets")? } else { Vec::new() };

        let started = Instant::now();
        let mut busy = Duration::ZERO;
        let mut sends: Vec<(Work, Tensor)> = Vec::new();
        let mut saved: Vec<(Tensor, Tensor)> = Vec::new();
        let mut loss_sum = 0.0;
        for i in 0..self.micro_batches {
            let x = if first {
                inputs[i].shallow_clone()
            } else {
                // A leaf of this stage's graph: its gradient goes back to the previous stage.
                self.recv_tensor(stage - 1)?.set_requires_grad(true)
            };
            let computing = Instant::now();
            let y = self.stage.forward_t(&x, true);
            let y = if last {
                let loss = loss_fn(&y, &labels[i]) / m as f64;
                loss_sum += loss.double_value(&[]);
                loss
            } else {
                y
            };
            busy += computing.elapsed();
            if !last {
                sends.extend(self.send_tensor(&y.detach(), stage + 1)?);
            }
            saved.push((x, y));
        }
        // GPipe: the backwards in the forwards' order, as ScheduleGPipe runs them.
        for (x, y) in saved {
            let grad = if last { None } else { Some(self.recv_tensor(stage + 1)?) };
            let computing = Instant::now();
            match grad {
                // d(sum(y * g))/dθ is the vector-Jacobian product autograd needs.
                Some(g) => (&y * g).sum(y.kind()).backward(),
                None => y.backward(),
            }
            busy += computing.elapsed();
            if !first {
                sends.extend(self.send_tensor(&x.grad(), stage - 1)?);
            }
        }
        for (work, _keep) in sends {
            work.wait()?;
        }
        Ok(PipelineStep {
            loss: last.then_some(loss_sum),
            stage,
            stages,
            micro_batches: self.micro_batches,
            busy,
            total: started.elapsed(),
        })
    }

    /// The whole model's output for `input`, in evaluation mode and without gradients
    /// (validation): the first stage reads `input` (the other ranks' may be anything),
    /// each stage hands its output to the next, and the last stage returns the model's
    /// output; the other stages return `None`. The batch goes through whole: with no
    /// backward to overlap, micro-batches would only add messages.
    pub fn eval(&self, input: &Tensor) -> Result<Option<Tensor>> {
        let (stage, stages) = (self.group.rank(), self.group.world_size());
        let _no_grad = tch::no_grad_guard();
        let x = if stage == 0 { input.shallow_clone() } else { self.recv_tensor(stage - 1)? };
        let y = self.stage.forward_t(&x, false);
        if stage + 1 == stages {
            return Ok(Some(y));
        }
        for (work, _keep) in self.send_tensor(&y, stage + 1)? {
            work.wait()?;
        }
        Ok(None)
    }

    /// Sends the shape and dtype ahead of the data, so the receiver can allocate it.
    fn send_tensor(&self, t: &Tensor, dst: usize) -> Result<Vec<(Work, Tensor)>> {
        let shape = t.size();
        if shape.len() > MAX_DIMS {
            return Err(DistError::invalid(format!(
                "pipeline: activations of {} dimensions: at most {MAX_DIMS} travel between stages",
                shape.len()
            )));
        }
        let mut header = vec![0i64; MAX_DIMS + 2];
        header[0] = shape.len() as i64;
        header[1..=shape.len()].copy_from_slice(&shape);
        header[MAX_DIMS + 1] = kind_code(t.kind())?;
        let header = Tensor::from_slice(&header);
        let data = t.contiguous();
        let first = self.group.isend(&header, dst, 0)?;
        let second = self.group.isend(&data, dst, 0)?;
        Ok(vec![(first, header), (second, data)])
    }

    fn recv_tensor(&self, src: usize) -> Result<Tensor> {
        let mut header = Tensor::zeros([MAX_DIMS as i64 + 2], (Kind::Int64, Device::Cpu));
        self.group.recv(&mut header, src, 0)?;
        let header = Vec::<i64>::try_from(&header).map_err(|e| DistError::invalid(e.to_string()))?;
        let dims = header[0] as usize;
        let kind = kind_of(header[MAX_DIMS + 1])?;
        let mut data = Tensor::empty(&header[1..=dims], (kind, self.device()));
        self.group.recv(&mut data, src, 0)?;
        Ok(data)
    }

    /// Where received tensors go: the group's GPU when it is bound to one, else the CPU.
    fn device(&self) -> Device {
        self.group.bound_device().unwrap_or(Device::Cpu)
    }
}

const KINDS: [Kind; 6] = [Kind::Float, Kind::Double, Kind::Half, Kind::BFloat16, Kind::Int64, Kind::Int];

fn kind_code(kind: Kind) -> Result<i64> {
    KINDS.iter().position(|&k| k == kind).map(|i| i as i64).ok_or_else(|| {
        DistError::invalid(format!("pipeline: activations of dtype {kind:?} cannot travel between stages"))
    })
}

fn kind_of(code: i64) -> Result<Kind> {
    KINDS
        .get(code as usize)
        .copied()
        .ok_or_else(|| DistError::invalid(format!("pipeline: unknown dtype code {code}")))
}

impl<M: std::fmt::Debug> std::fmt::Debug for Pipeline<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("stage", &self.group.rank())
            .field("stages", &self.group.world_size())
            .field("micro_batches", &self.micro_batches)
            .field("module", &self.stage)
            .finish()
    }
}
