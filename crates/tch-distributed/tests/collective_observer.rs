//! Every collective a group starts reaches the observer, in order, as the program
//! asked for it: operation, reduce op, root, dtype, element count, sequence number and
//! (small tensors) the input's values before the call. The checker judges steps 8 and
//! 9 from exactly this. FSDP's collectives are seen the same way, and timed with their
//! sizes in bytes.
mod common;

use common::single_rank_group;
use std::sync::{Arc, Mutex};

use tch::{Kind, Tensor};
use tch_distributed::debug::{self, CollectiveCall};
use tch_distributed::spans::Arg;
use tch_distributed::ReduceOp;

#[test]
fn the_observer_sees_each_call_as_issued() {
    let seen: Arc<Mutex<Vec<CollectiveCall>>> = Arc::default();
    let sink = seen.clone();
    assert!(debug::set_collective_observer(move |call| sink.lock().unwrap().push(call.clone())));
    assert!(!debug::set_collective_observer(|_| {}), "a second observer must be refused");

    let group = single_rank_group(None);
    let mut throughput = Tensor::from(652.5f64);
    group.reduce(&mut throughput, 0, ReduceOp::Sum).unwrap();
    let mut metrics = Tensor::from_slice(&[0.75f32, 0.5]);
    group.all_reduce(&mut metrics, ReduceOp::Max).unwrap();
    group.barrier().unwrap();
    let mut big = Tensor::zeros([100], (Kind::Float, tch::Device::Cpu));
    group.broadcast(&mut big, 0).unwrap();
    // Refused before it starts: not a collective, no number.
    assert!(group.reduce(&mut throughput, 3, ReduceOp::Sum).is_err());
    group.all_gather_to_vec(&Tensor::from(1i64)).unwrap();
    // FSDP's collectives, timed on the timeline with their sizes in bytes.
    tch_distributed::spans::start();
    let shard = Tensor::from_slice(&[1.5f32, 2.5, 3.5]);
    let mut full = Tensor::zeros([3], (Kind::Float, tch::Device::Cpu));
    group.all_gather_into_tensor(&mut full, &shard).unwrap();
    assert_eq!(Vec::<f32>::try_from(&full).unwrap(), [1.5, 2.5, 3.5]);
    let grads = Tensor::ones([2, 64], (Kind::Double, tch::Device::Cpu));
    let mut grad_shard = Tensor::zeros([2, 64], (Kind::Double, tch::Device::Cpu));
    group.reduce_scatter_tensor(&mut grad_shard, &grads, ReduceOp::Sum).unwrap();
    // One rank cannot send to itself: refused, no number taken.
    assert!(group.send(&shard, 0, 0).is_err());
    tch_distributed::spans::stop();

    let seen = seen.lock().unwrap();
    let described: Vec<(u64, String)> = seen.iter().map(|c| (c.seq, c.describe())).collect();
    assert_eq!(
        described,
        [
            (0, "reduce(op=SUM, root=0) Double[1]".to_string()),
            (1, "all_reduce(op=MAX) Float[2]".to_string()),
            (2, "barrier()".to_string()),
            (3, "broadcast(root=0) Float[100]".to_string()),
            (4, "all_gather() Int64[1]".to_string()),
            (5, "all_gather_into_tensor() Float[3]".to_string()),
            (6, "reduce_scatter_tensor(op=SUM) Double[128]".to_string()),
        ]
    );
    assert_eq!((seen[5].bytes(), seen[6].bytes()), (12, 1024));
    assert_eq!(seen[5].values, Some(vec![1.5, 2.5, 3.5]));
    let timed: Vec<(String, Option<Arg>)> = tch_distributed::spans::take()
        .into_iter()
        .map(|e| (e.name, e.args.iter().find(|(k, _)| *k == "bytes").map(|(_, v)| v.clone())))
        .collect();
    assert_eq!(
        timed,
        [
            ("all_gather_into_tensor".to_string(), Some(Arg::Int(12))),
            ("reduce_scatter_tensor".to_string(), Some(Arg::Int(1024)))
        ]
    );
    assert_eq!(seen[0].values, Some(vec![652.5]));
    assert_eq!(seen[1].values, Some(vec![0.75, 0.5]));
    assert_eq!(seen[3].values, None, "large tensors are not copied");
    assert!(seen.iter().all(|c| c.rank == 0 && c.world_size == 1 && c.group == seen[0].group));
}
