//! How fast the generated stand-in for Fashion-MNIST is made: the full set (60,000
//! training and 10,000 validation images), generated and gzip-encoded as its files
//! are, timed split by split. A measurement for people, not a test: nothing asserts on
//! it (the labkit test only checks that a tenth of the set reads back whole).
//!
//!     cargo run -p ddp-bench --release --bin generate
//!
//! The stand-in has no PyTorch counterpart to run beside it (torchvision downloads the
//! real files); the figure to compare with is the few seconds a first run waits.
use std::time::Instant;

use clap::Parser;
use labkit::data::{generate_split, idx, GenerateOptions};

#[derive(Parser, Debug)]
#[command(about = "Time making the generated stand-in for Fashion-MNIST (60,000 + 10,000 images)")]
struct Args {
    /// Times to make each split; the table shows the fastest.
    #[arg(long, default_value_t = 3)]
    repeats: usize,
}

fn main() {
    let args = Args::parse();
    let options = GenerateOptions::default();
    println!("{:<10} {:>8} {:>12} {:>12} {:>14}", "split", "images", "generate s", "encode s", "images/sec");
    for (split, n) in [(0u64, options.train), (1u64, options.test)] {
        let mut best = (f64::MAX, f64::MAX);
        for _ in 0..args.repeats.max(1) {
            let t = Instant::now();
            let (pixels, _) = generate_split(options.seed, split, n);
            let made = t.elapsed().as_secs_f64();
            let t = Instant::now();
            let bytes = idx::encode_images(&pixels);
            let encoded = t.elapsed().as_secs_f64();
            assert!(!bytes.is_empty());
            best = (best.0.min(made), best.1.min(encoded));
        }
        let name = if split == 0 { "training" } else { "validation" };
        let rate = n as f64 / (best.0 + best.1);
        println!("{name:<10} {n:>8} {:>12.2} {:>12.2} {rate:>14.0}", best.0, best.1);
    }
}
