//! ddp-lab, solution of step 6: DistributedSampler and set_epoch.

// PLACEHOLDER master: the real lab program replaces this file. Each step owns a
// step block; crates/coursegen/src/markers.rs describes the marker language.

fn main() {
    println!("ddp-lab placeholder");
    println!("step 0 done: import the distributed module");
    println!("step 1 done: the --num-nodes, --num-gpus and --node-id options");
    println!("step 2 done: world size and rendezvous address");
    println!("step 3 done: training moves into worker(local_rank, args)");
    println!("step 4 done: global rank and the process group");
    println!("step 5 done: download once per node, then a barrier");
    println!("step 6 done: DistributedSampler and set_epoch");
    println!("step 7 not done yet");
    println!("step 8 not done yet");
    println!("step 9 not done yet");
    println!("step 10 not done yet");
    println!("step 11 not done yet");
}
