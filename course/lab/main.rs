{{header}}

// PLACEHOLDER master: the real lab program replaces this file. Each step owns a
// step block; crates/coursegen/src/markers.rs describes the marker language.

fn main() {
    println!("ddp-lab placeholder");
    //@ step 0
    println!("step 0 done: import the distributed module");
    //@ todo
    // TODO Step 0: import the distributed module.
    //@ old
    println!("step 0 not done yet");
    //@ end
    //@ step 1
    println!("step 1 done: the --num-nodes, --num-gpus and --node-id options");
    //@ todo
    // TODO Step 1: the --num-nodes, --num-gpus and --node-id options.
    //@ old
    println!("step 1 not done yet");
    //@ end
    //@ step 2
    println!("step 2 done: world size and rendezvous address");
    //@ todo
    // TODO Step 2: world size and rendezvous address.
    //@ old
    println!("step 2 not done yet");
    //@ end
    //@ step 3
    println!("step 3 done: training moves into worker(local_rank, args)");
    //@ todo
    // TODO Step 3: training moves into worker(local_rank, args).
    //@ old
    println!("step 3 not done yet");
    //@ end
    //@ step 4
    println!("step 4 done: global rank and the process group");
    //@ todo
    // TODO Step 4: global rank and the process group.
    //@ old
    println!("step 4 not done yet");
    //@ end
    //@ step 5
    println!("step 5 done: download once per node, then a barrier");
    //@ todo
    // TODO Step 5: download once per node, then a barrier.
    //@ old
    println!("step 5 not done yet");
    //@ end
    //@ step 6
    println!("step 6 done: DistributedSampler and set_epoch");
    //@ todo
    // TODO Step 6: DistributedSampler and set_epoch.
    //@ old
    println!("step 6 not done yet");
    //@ end
    //@ step 7
    println!("step 7 done: one device per rank, and the model wrapped in DDP");
    //@ todo
    // TODO Step 7: one device per rank, and the model wrapped in DDP.
    //@ old
    println!("step 7 not done yet");
    //@ end
    //@ step 8
    println!("step 8 done: throughput: a barrier and a reduce to rank 0");
    //@ todo
    // TODO Step 8: throughput: a barrier and a reduce to rank 0.
    //@ old
    println!("step 8 not done yet");
    //@ end
    //@ step 9
    println!("step 9 done: validation metrics averaged over all ranks");
    //@ todo
    // TODO Step 9: validation metrics averaged over all ranks.
    //@ old
    println!("step 9 not done yet");
    //@ end
    //@ step 10
    println!("step 10 done: the program spawns its own ranks");
    //@ todo
    // TODO Step 10: the program spawns its own ranks.
    //@ old
    println!("step 10 not done yet");
    //@ end
    //@ step 11
    println!("step 11 done: the quick evaluation");
    //@ todo
    // TODO Step 11: the quick evaluation.
    //@ old
    println!("step 11 not done yet");
    //@ end
}
