//! ddp-lab, step 4: global rank and the process group.
//!
//! Look for `TODO Step 4`: those comments mark this step's work.
//! `checker verify step 4` checks it; `checker hint step 4` helps when you are stuck.

// PLACEHOLDER master: the real lab program replaces this file. Each step owns a
// step block; crates/coursegen/src/markers.rs describes the marker language.

fn main() {
    println!("ddp-lab placeholder");
    println!("step 0 done: import the distributed module");
    println!("step 1 done: the --num-nodes, --num-gpus and --node-id options");
    println!("step 2 done: world size and rendezvous address");
    println!("step 3 done: training moves into worker(local_rank, args)");
    // TODO Step 4: global rank and the process group.
    println!("step 4 not done yet");
    println!("step 5 not done yet");
    println!("step 6 not done yet");
    println!("step 7 not done yet");
    println!("step 8 not done yet");
    println!("step 9 not done yet");
    println!("step 10 not done yet");
    println!("step 11 not done yet");
}
