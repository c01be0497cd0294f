//! The lab's optimizer from step 12 on: SGD, with momentum if `--momentum` asks for it,
//! whose state (one momentum buffer per parameter) is tensors this module owns, so that
//! a checkpoint can save it and `--resume` restore it. tch's `nn::Sgd { momentum, .. }`
//! keeps its buffers inside libtorch, out of the program's reach.
//!
//! The update is PyTorch's `torch.optim.SGD` (no dampening, no Nesterov, no weight
//! decay): the first step of a parameter takes `buf = grad`, every later one
//! `buf = momentum * buf + grad`, then `p -= lr * buf`. libtorch's own plain SGD applies
//! that last line: before it steps, each gradient is overwritten with its buffer (the
//! step's direction, PyTorch's `d_p`). So the parameters equal tch's and PyTorch's to
//! the bit, and with momentum 0 (the DLI lab's plain SGD, the default) nothing but
//! libtorch's SGD runs.
use tch::nn::{self, OptimizerConfig, VarStore};
use tch::Tensor;

use crate::error::Result;

/// What `labkit::train` steps with: tch's `nn::Optimizer` (the lab's steps 0-11) or
/// [`Sgd`] (step 12 on).
pub trait Optimizer {
    /// Clears every gradient before a backward pass.
    fn zero_grad(&mut self);
    /// Updates the parameters from their gradients.
    fn step(&mut self);
    /// The libtorch optimizer that writes the parameters: what FSDP checks is on its
    /// shards, and the tensors the trace fingerprints.
    fn stepper(&self) -> &nn::Optimizer;
    /// Elements of the state it keeps beside the parameters (momentum buffers): what
    /// FSDP's shards line counts. None for tch's own SGD, which keeps no state here.
    fn state_numel(&self) -> i64 {
        0
    }
}

impl Optimizer for nn::Optimizer {
    fn zero_grad(&mut self) {
        nn::Optimizer::zero_grad(self)
    }
    fn step(&mut self) {
        nn::Optimizer::step(self)
    }
    fn stepper(&self) -> &nn::Optimizer {
        self
    }
}

/// One parameter the optimizer steps, by its VarStore name, and its momentum buffer
/// (`None` until its first step with a gradient, as in PyTorch's state).
struct Slot {
    name: String,
    parameter: Tensor,
    buffer: Option<Tensor>,
}

/// SGD with momentum whose buffers the program can read and restore (see the module
/// documentation); PyTorch's `optim.SGD(params, lr=lr, momentum=momentum)`.
///
/// ```
/// use labkit::Optimizer;
/// use tch::nn::{self, Module};
///
/// let vs = nn::VarStore::new(tch::Device::Cpu);
/// let layer = nn::linear(vs.root() / "fc", 3, 1, Default::default());
/// let mut optimizer = labkit::Sgd::new(&vs, 0.1, 0.9)?;
/// for _ in 0..2 {
///     optimizer.zero_grad();
///     layer.forward(&tch::Tensor::ones([4, 3], tch::kind::FLOAT_CPU)).sum(tch::Kind::Float).backward();
///     optimizer.step();
/// }
/// // One buffer per parameter, as a checkpoint saves them.
/// let names: Vec<String> = optimizer.momentum_buffers().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["fc.bias", "fc.weight"]);
/// # Ok::<(), labkit::BoxError>(())
/// ```
pub struct Sgd {
    stepper: nn::Optimizer,
    learning_rate: f64,
    momentum: f64,
    /// Sorted by name; empty with momentum 0, which keeps no state.
    slots: Vec<Slot>,
}

impl Sgd {
    /// SGD over `vs`'s trainable variables (a model's VarStore, or FSDP's
    /// `fsdp.shards()?`, where each rank then keeps the buffers of its shards only).
    /// `momentum` 0 is the DLI lab's plain SGD; it must be at least 0 and below 1.
    pub fn new(vs: &VarStore, learning_rate: f64, momentum: f64) -> Result<Sgd> {
        if !(0.0..1.0).contains(&momentum) {
            return Err(format!(
                "momentum {momentum} is not usable: expected at least 0 and below 1, such as 0.9"
            )
            .into());
        }
        let stepper = nn::Sgd::default().build(vs, learning_rate)?;
        let mut slots = Vec::new();
        if momentum != 0.0 {
            let named = vs.variables();
            for parameter in vs.trainable_variables() {
                let name = named
                    .iter()
                    .find(|(_, t)| t.is_set_to(&parameter))
                    .map(|(name, _)| name.clone())
                    .ok_or("a trainable variable of the VarStore has no name")?;
                slots.push(Slot { name, parameter, buffer: None });
            }
            slots.sort_by(|a, b| a.name.cmp(&b.name));
        }
        Ok(Sgd { stepper, learning_rate, momentum, slots })
    }

    /// The learning rate it was built with.
    pub fn learning_rate(&self) -> f64 {
        self.learning_rate
    }

    /// The momentum it was built with (0: plain SGD).
    pub fn momentum(&self) -> f64 {
        self.momentum
    }

    /// Every momentum buffer so far, by its parameter's name, sorted: PyTorch's
    /// `optimizer.state_dict()["state"]`. None before the first step, none with momentum 0.
    pub fn momentum_buffers(&self) -> Vec<(String, Tensor)> {
        self.slots.iter().filter_map(|s| Some((s.name.clone(), s.buffer.as_ref()?.shallow_clone()))).collect()
    }

    /// The parameters' names, sorted (none with momentum 0): the names
    /// [`Sgd::momentum_buffers`] and [`Sgd::restore_momentum_buffers`] use.
    pub fn parameter_names(&self) -> Vec<&str> {
        self.slots.iter().map(|s| s.name.as_str()).collect()
    }

    /// Replaces every momentum buffer with `buffers` (PyTorch's
    /// `optimizer.load_state_dict`): each copied onto its parameter's device; a
    /// parameter missing from `buffers` starts afresh, as one never stepped. An error,
    /// and no buffer changed, for a name it does not step or a shape that differs.
    pub fn restore_momentum_buffers(&mut self, buffers: Vec<(String, Tensor)>) -> Result<(), String> {
        let mut restored: Vec<Option<Tensor>> = (0..self.slots.len()).map(|_| None).collect();
        for (name, buffer) in buffers {
            let Ok(i) = self.slots.binary_search_by(|s| s.name.as_str().cmp(&name)) else {
                return Err(format!(
                    "it holds a momentum buffer for {name}, which the optimizer does not step"
                ));
            };
            let parameter = &self.slots[i].parameter;
            if buffer.size() != parameter.size() {
                return Err(format!(
                    "the momentum buffer of {name} has shape {:?}, the parameter's is {:?}",
                    buffer.size(),
                    parameter.size()
                ));
            }
            restored[i] =
                Some(buffer.to_device(parameter.device()).to_kind(parameter.kind()).detach().copy());
        }
        for (slot, buffer) in self.slots.iter_mut().zip(restored) {
            slot.buffer = buffer;
        }
        Ok(())
    }
}

impl Optimizer for Sgd {
    fn zero_grad(&mut self) {
        self.stepper.zero_grad();
    }

    fn step(&mut self) {
        let momentum = self.momentum;
        tch::no_grad(|| {
            for slot in &mut self.slots {
                let mut grad = slot.parameter.grad();
                if !grad.defined() {
                    continue; // PyTorch skips a parameter without a gradient, state and all.
                }
                let buffer = match slot.buffer.take() {
                    None => grad.detach().copy(),
                    Some(mut buffer) => {
                        let _ = buffer.g_mul_scalar_(momentum);
                        let _ = buffer.g_add_(&grad);
                        buffer
                    }
                };
                grad.copy_(&buffer);
                slot.buffer = Some(buffer);
            }
        });
        self.stepper.step();
    }

    fn stepper(&self) -> &nn::Optimizer {
        &self.stepper
    }

    fn state_numel(&self) -> i64 {
        self.slots.iter().filter_map(|s| s.buffer.as_ref()).map(|b| b.numel() as i64).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::nn::Module;
    use tch::{Device, Kind};

    /// Two layers and a ReLU: gradients that differ from step to step.
    fn model(vs: &VarStore) -> impl Module {
        nn::seq()
            .add(nn::linear(vs.root() / "fc1", 5, 4, Default::default()))
            .add_fn(|x| x.relu())
            .add(nn::linear(vs.root() / "fc2", 4, 3, Default::default()))
    }

    fn batch(step: i64) -> Tensor {
        Tensor::arange(6 * 5, (Kind::Float, Device::Cpu)).reshape([6, 5]).sin() * (step + 1) as f64
    }

    fn train(net: &impl Module, optimizer: &mut impl Optimizer, steps: std::ops::Range<i64>) {
        for step in steps {
            optimizer.zero_grad();
            let loss = net.forward(&batch(step)).square().mean(Kind::Float);
            loss.backward();
            optimizer.step();
        }
    }

    fn same(a: &VarStore, b: &VarStore) -> bool {
        let (a, b) = (a.variables(), b.variables());
        a.len() == b.len() && a.iter().all(|(k, v)| v.equal(&b[k]))
    }

    fn pair(seed: i64) -> (VarStore, impl Module, VarStore, impl Module) {
        let _rng = crate::torch_rng_lock();
        tch::manual_seed(seed);
        let vs = VarStore::new(Device::Cpu);
        let net = model(&vs);
        let mut other_vs = VarStore::new(Device::Cpu);
        let other = model(&other_vs);
        other_vs.copy(&vs).unwrap();
        (vs, net, other_vs, other)
    }

    #[test]
    fn steps_equal_tchs_sgd_with_momentum_to_the_bit() {
        let (vs, net, tch_vs, tch_net) = pair(7);
        let mut ours = Sgd::new(&vs, 0.05, 0.9).unwrap();
        let mut theirs = nn::Sgd { momentum: 0.9, ..Default::default() }.build(&tch_vs, 0.05).unwrap();
        train(&net, &mut ours, 0..6);
        train(&tch_net, &mut theirs, 0..6);
        assert!(same(&vs, &tch_vs), "the parameters after 6 steps differ from tch's momentum SGD");
        // And momentum changed the path: plain SGD ends elsewhere.
        let (plain_vs, plain_net, _, _) = pair(7);
        let mut plain = nn::Sgd::default().build(&plain_vs, 0.05).unwrap();
        train(&plain_net, &mut plain, 0..6);
        assert!(!same(&vs, &plain_vs));
    }

    #[test]
    fn momentum_zero_is_plain_sgd_and_keeps_no_state() {
        let (vs, net, tch_vs, tch_net) = pair(3);
        let mut ours = Sgd::new(&vs, 0.05, 0.0).unwrap();
        let mut theirs = nn::Sgd::default().build(&tch_vs, 0.05).unwrap();
        train(&net, &mut ours, 0..3);
        train(&tch_net, &mut theirs, 0..3);
        assert!(same(&vs, &tch_vs));
        assert!(ours.momentum_buffers().is_empty() && ours.parameter_names().is_empty());
    }

    #[test]
    fn restored_buffers_continue_as_if_never_interrupted() {
        let (vs, net, resumed_vs, resumed_net) = pair(11);
        let mut uninterrupted = Sgd::new(&vs, 0.05, 0.8).unwrap();
        train(&net, &mut uninterrupted, 0..3);
        // A restart: the weights and the buffers after 3 steps, then 3 more steps each.
        let mut resumed_vs = resumed_vs;
        resumed_vs.copy(&vs).unwrap();
        let mut resumed = Sgd::new(&resumed_vs, 0.05, 0.8).unwrap();
        resumed.restore_momentum_buffers(uninterrupted.momentum_buffers()).unwrap();
        train(&net, &mut uninterrupted, 3..6);
        train(&resumed_net, &mut resumed, 3..6);
        assert!(same(&vs, &resumed_vs), "resumed with the buffers differs from the uninterrupted run");
        // Without them (fresh buffers) the run goes elsewhere: the buffers matter.
        let (fresh_vs, fresh_net, _, _) = pair(11);
        let mut fresh_vs = fresh_vs;
        let (before_vs, before_net, _, _) = pair(11);
        let mut before = Sgd::new(&before_vs, 0.05, 0.8).unwrap();
        train(&before_net, &mut before, 0..3);
        fresh_vs.copy(&before_vs).unwrap();
        let mut fresh = Sgd::new(&fresh_vs, 0.05, 0.8).unwrap();
        train(&fresh_net, &mut fresh, 3..6);
        assert!(!same(&vs, &fresh_vs), "the buffers made no difference");
    }

    #[test]
    fn foreign_buffers_and_bad_momentum_are_refused() {
        let (vs, _net, _, _) = pair(1);
        let mut optimizer = Sgd::new(&vs, 0.1, 0.5).unwrap();
        let e = optimizer
            .restore_momentum_buffers(vec![("fc9.weight".into(), Tensor::zeros([3], tch::kind::FLOAT_CPU))]);
        assert!(e.unwrap_err().contains("fc9.weight"));
        let e = optimizer
            .restore_momentum_buffers(vec![("fc1.bias".into(), Tensor::zeros([5], tch::kind::FLOAT_CPU))]);
        assert!(e.unwrap_err().contains("shape [5]"));
        for bad in [-0.1, 1.0, f64::NAN] {
            let e = Sgd::new(&vs, 0.1, bad).err().expect("refused");
            assert!(e.to_string().contains("below 1"), "{e}");
        }
    }
}
