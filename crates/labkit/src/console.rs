//! The lines a run prints about its processes: the world it is about to form, and each
//! worker as it starts (both also go to the trace the checker reads).
use lab_trace::event;
use tch_distributed as dist;

use crate::trace;

/// Prints the world this program is about to form, e.g.
/// `World size = 4; rank 0's rendezvous at localhost:9956`.
///
/// Printed once per node: not by the copies of `main` that `spawn` starts, nor by
/// launched processes other than local rank 0.
pub fn announce_world(world_size: usize, rendezvous: &dist::Init) {
    let address = rendezvous.address();
    if dist::spawned_rank().is_none() && dist::local_rank().ok().flatten().unwrap_or(0) == 0 {
        println!("World size = {world_size}; rendezvous at {address}");
    }
    trace::record(event::World { world_size, rendezvous: address.to_string() });
}

/// Says that a worker started: `Worker started: local rank 1`.
pub fn worker_started(local_rank: usize) {
    println!("Worker started: local rank {local_rank} (pid {})", std::process::id());
    trace::record(event::Worker { worker_local_rank: local_rank });
}
