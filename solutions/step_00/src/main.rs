//! ddp-lab, solution of step 0: import the distributed module.

// PLACEHOLDER master: the real lab program replaces this file. Each step owns a
// step block; crates/coursegen/src/markers.rs describes the marker language.

fn main() {
    println!("ddp-lab placeholder");
    println!("step 0 done: import the distributed module");
    println!("step 1 not done yet");
    println!("step 2 not done yet");
    println!("step 3 not done yet");
    println!("step 4 not done yet");
    println!("step 5 not done yet");
    println!("step 6 not done yet");
    println!("step 7 not done yet");
    println!("step 8 not done yet");
    println!("step 9 not done yet");
    println!("step 10 not done yet");
    println!("step 11 not done yet");
}
