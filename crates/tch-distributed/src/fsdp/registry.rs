//! Which of the model's variables the `fully_shard` calls took, and the units they made.
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use tch::nn::Variables;
use tch::Tensor;

use super::unit::{lock, Named, Unit};

#[derive(Default)]
pub(super) struct Registry {
    /// Names of the variables (parameters and buffers) some `fully_shard` took.
    pub(super) claimed: HashSet<String>,
    /// Buffers (and frozen variables) the units took: not sharded.
    pub(super) buffers: Named,
    pub(super) units: Vec<Arc<Unit>>,
    pub(super) root_sharded: bool,
}

/// The VarStore's variables: trainable ones in creation order, then the others, by name.
pub(super) fn variables(model: &Mutex<Variables>) -> (Named, Named) {
    let model = lock(model);
    let mut named: Vec<(&String, &Tensor)> = model.named_variables.iter().collect();
    named.sort_by(|a, b| a.0.cmp(b.0));
    let mut trainable = Vec::new();
    for var in &model.trainable_variables {
        // The same tensor under its name (is_set_to: the same storage, even once freed).
        if let Some(i) = named.iter().position(|(_, t)| t.is_set_to(&var.tensor)) {
            let (name, t) = named.remove(i);
            trainable.push((name.clone(), t.shallow_clone()));
        }
    }
    let others = named.into_iter().map(|(n, t)| (n.clone(), t.shallow_clone())).collect();
    (trainable, others)
}
