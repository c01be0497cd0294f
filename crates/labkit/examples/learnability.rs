//! Measures how learnable the generated Fashion-MNIST stand-in is: trains a model
//! single-process on the CPU with the lab's optimiser (plain SGD, no momentum,
//! cross-entropy, pixels in [0, 1]) and prints validation accuracy and time per epoch.
//!
//! ```sh
//! cargo run --release -p labkit --example learnability -- --train 4000 --test 2000 --epochs 3
//! cargo run --release -p labkit --example learnability -- --model linear --lr 0.1 --epochs 20 --train 60000
//! ```
//!
//! Options (all optional): `--dir DIR` (data directory, default `data`), `--dataset
//! generated|real|auto` (default generated), `--seed S` (of the stand-in), `--train N`
//! and `--test N` (subset sizes), `--epochs E`, `--batch-size B` (default 32), `--lr X`
//! (default 0.01, the lab's base LR), `--model wrn|linear` (narrow WideResNet
//! [8,16,32,64] or a linear classifier), `--threads T`.

use std::path::PathBuf;
use std::time::Instant;

use labkit::data::{DatasetKind, DatasetOptions, GenerateOptions, Split};
use labkit::{ensure_dataset, Failure, FashionMnist, Norm, WideResNet, Widths};
use tch::nn::{self, ModuleT, OptimizerConfig};
use tch::{Device, Kind, Tensor};

struct Args {
    dir: PathBuf,
    dataset: DatasetKind,
    seed: u64,
    train: usize,
    test: usize,
    epochs: usize,
    batch_size: usize,
    lr: f64,
    linear: bool,
    threads: Option<i32>,
}

fn parse_args() -> Args {
    let mut a = Args {
        dir: PathBuf::from("data"),
        dataset: DatasetKind::Generated,
        seed: 0,
        train: 4000,
        test: 2000,
        epochs: 3,
        batch_size: 32,
        lr: 0.01,
        linear: false,
        threads: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--dir" => a.dir = PathBuf::from(value()),
            "--dataset" => a.dataset = value().parse().unwrap_or_else(|e| panic!("{e}")),
            "--seed" => a.seed = value().parse().expect("--seed"),
            "--train" => a.train = value().parse().expect("--train"),
            "--test" => a.test = value().parse().expect("--test"),
            "--epochs" => a.epochs = value().parse().expect("--epochs"),
            "--batch-size" => a.batch_size = value().parse().expect("--batch-size"),
            "--lr" => a.lr = value().parse().expect("--lr"),
            "--model" => a.linear = value() == "linear",
            "--threads" => a.threads = Some(value().parse().expect("--threads")),
            other => panic!("unknown option {other}"),
        }
    }
    a
}

/// Validation loss (mean of batch losses, as the lab computes it), accuracy, and the
/// confusion matrix (rows: true class, columns: predicted).
fn evaluate(model: &dyn ModuleT, split: &Split) -> (f64, f64, [[u32; 10]; 10]) {
    let _guard = tch::no_grad_guard();
    let (mut loss, mut correct, mut batches) = (0.0, 0usize, 0);
    let mut confusion = [[0u32; 10]; 10];
    let all: Vec<usize> = (0..split.len()).collect();
    for chunk in all.chunks(500) {
        let (x, y) = split.batch(chunk, Device::Cpu);
        let logits = model.forward_t(&x, false);
        loss += logits.cross_entropy_for_logits(&y).double_value(&[]);
        let predicted = Vec::<i64>::try_from(&logits.argmax(-1, false)).unwrap();
        let truth = Vec::<i64>::try_from(&y).unwrap();
        for (&p, &t) in predicted.iter().zip(&truth) {
            confusion[t as usize][p as usize] += 1;
            correct += usize::from(p == t);
        }
        batches += 1;
    }
    (loss / batches as f64, correct as f64 / split.len() as f64, confusion)
}

fn print_confusion(confusion: &[[u32; 10]; 10]) {
    println!("confusion (rows: true class, columns: predicted)");
    for (t, row) in confusion.iter().enumerate() {
        let cells: Vec<String> = row.iter().map(|c| format!("{c:5}")).collect();
        println!("{:>12} {}", labkit::data::CLASS_NAMES[t], cells.join(""));
    }
}

#[derive(Debug)]
struct Linear(nn::Linear);

impl ModuleT for Linear {
    fn forward_t(&self, xs: &Tensor, _train: bool) -> Tensor {
        xs.flatten(1, -1).apply(&self.0)
    }
}

fn main() {
    let args = parse_args();
    if let Some(t) = args.threads {
        tch::set_num_threads(t);
    }
    let t0 = Instant::now();
    let ready = ensure_dataset(&DatasetOptions {
        dir: args.dir.clone(),
        kind: args.dataset,
        generated: GenerateOptions { seed: args.seed, ..Default::default() },
        ..Default::default()
    })
    .unwrap_or_else(|e| {
        eprintln!("error: {e}");
        std::process::exit(e.exit_code().into())
    });
    println!("{} in {:.2} s", ready.summary(), t0.elapsed().as_secs_f64());
    let t0 = Instant::now();
    let set = FashionMnist::load(&ready.dir).unwrap_or_else(|e| {
        eprintln!("error: {e}");
        std::process::exit(e.exit_code().into())
    });
    println!("loaded (with checksums) in {:.2} s", t0.elapsed().as_secs_f64());
    let (train, test) = (set.train.subset(args.train), set.test.subset(args.test));

    tch::manual_seed(0);
    let vs = nn::VarStore::new(Device::Cpu);
    let model: Box<dyn ModuleT> = if args.linear {
        Box::new(Linear(nn::linear(vs.root() / "fc", 784, 10, Default::default())))
    } else {
        Box::new(WideResNet::new(&vs.root(), Widths::NARROW, Norm::BatchNorm))
    };
    let mut opt = nn::Sgd::default().build(&vs, args.lr).unwrap();
    println!(
        "model {}, train {} test {} images, batch size {}, SGD lr {} (no momentum), {} threads",
        if args.linear { "linear" } else { "WideResNet [8,16,32,64]" },
        train.len(),
        test.len(),
        args.batch_size,
        args.lr,
        tch::get_num_threads()
    );
    let (loss, acc, mut confusion) = evaluate(model.as_ref(), &test);
    println!("epoch  0: validation loss {loss:.3}, accuracy {acc:.3}");
    let start = Instant::now();
    for epoch in 1..=args.epochs {
        let t = Instant::now();
        let order = Tensor::randperm(train.len() as i64, (Kind::Int64, Device::Cpu));
        let order: Vec<i64> = Vec::try_from(&order).unwrap();
        let order: Vec<usize> = order.into_iter().map(|i| i as usize).collect();
        let mut train_loss = 0.0;
        let mut batches = 0;
        for chunk in order.chunks(args.batch_size) {
            let (x, y) = train.batch(chunk, Device::Cpu);
            let loss = model.forward_t(&x, true).cross_entropy_for_logits(&y);
            opt.backward_step(&loss);
            train_loss += loss.double_value(&[]);
            batches += 1;
        }
        let train_secs = t.elapsed().as_secs_f64();
        let (loss, acc, c) = evaluate(model.as_ref(), &test);
        confusion = c;
        println!(
            "epoch {epoch:2}: train loss {:.3}, validation loss {loss:.3}, accuracy {acc:.3}, \
             train {train_secs:.1} s ({:.0} img/s), epoch {:.1} s, cumulative {:.1} s",
            train_loss / batches as f64,
            train.len() as f64 / train_secs,
            t.elapsed().as_secs_f64(),
            start.elapsed().as_secs_f64()
        );
    }
    print_confusion(&confusion);
}
