//! ddp-lab, solution of step 1: the --num-nodes, --num-gpus and --node-id options.
// Some options are parsed before the steps that use them (step 4 reads the last ones).
#![allow(dead_code)]
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use labkit::{DataLoader, LoaderOptions, RunOptions};
use tch::nn::{self, OptimizerConfig};
#[allow(unused_imports)] // `dist` is used from step 2 on
use tch_distributed as dist;

/// Trains the lab's WideResNet on Fashion-MNIST and prints one line per epoch.
#[derive(Parser, Debug, Clone)]
#[command(version, about, long_about = None)]
struct Args {
    /// Images per batch, on each rank.
    #[arg(long, default_value_t = 32, value_parser = labkit::positive)]
    batch_size: usize,
    /// Most epochs to train.
    #[arg(long, default_value_t = 40, value_parser = labkit::positive)]
    epochs: usize,
    /// Learning rate of SGD (no momentum).
    #[arg(long, default_value_t = 0.01, value_parser = labkit::learning_rate)]
    base_lr: f64,
    /// Validation accuracy at which training may stop early.
    #[arg(long, default_value_t = 0.85)]
    target_accuracy: f64,
    /// Stop once this many epochs in a row reach the target accuracy.
    #[arg(long, default_value_t = 2)]
    patience: usize,
    /// Number of nodes (machines) in the job.
    #[arg(long, default_value_t = 1, value_parser = labkit::node_count)]
    num_nodes: usize,
    /// Ranks per node: one per GPU (or CPU processes on a machine without GPUs).
    #[arg(long, default_value_t = 1, value_parser = labkit::ranks_per_node)]
    num_gpus: usize,
    /// Index of this node, from 0 to num_nodes - 1.
    #[arg(long, default_value_t = 0, value_parser = labkit::node_index)]
    node_id: usize,
    #[command(flatten)]
    run: RunOptions,
}

fn main() -> ExitCode {
    let args = Args::parse();
    args.run.apply();
    // A node outside the job, or one that cannot place its ranks on the devices asked
    // for, is an error before anything starts.
    args.run.check_node(args.node_id, args.num_nodes, args.num_gpus);
    let result = training(args);
    labkit::finish(result)
}

/// The whole training run.
fn training(args: Args) -> labkit::Result<()> {
    let device = args.run.device.first();

    let data = args.run.dataset_options();
    labkit::prepare_dataset(&data)?;
    let (train_set, test_set) = labkit::load_dataset(&data, args.run.train_subset, args.run.test_subset)?;

    let train_sampler = labkit::RandomSampler::new(train_set.len());
    let test_sampler = labkit::SequentialSampler::new(test_set.len());
    let loader_options = LoaderOptions { batch_size: args.batch_size, device };
    let mut train_loader = DataLoader::new(&train_set, train_sampler, loader_options);
    let mut test_loader = DataLoader::new(&test_set, test_sampler, loader_options);

    let vs = nn::VarStore::new(device);
    let model = labkit::WideResNet::new(&vs.root(), &args.run, labkit::Norm::BatchNorm);
    let mut optimizer = nn::Sgd::default().build(&vs, args.base_lr)?;

    let mut early_stopping = labkit::EarlyStopping::new(args.target_accuracy, args.patience);
    // --resume: continue from the last checkpoint (weights, epoch, history), if any.
    let start = labkit::resume(&args.run, &vs, &mut early_stopping)?;
    let mut total_time = start.total_time;
    for epoch in start.epoch..args.epochs {
        let t0 = Instant::now();
        labkit::train(&model, &mut optimizer, &mut train_loader)?;
        let epoch_time = t0.elapsed().as_secs_f64();
        total_time += epoch_time;
        let images_per_sec = labkit::images_per_sec(train_loader.len(), args.batch_size, epoch_time);

        let (v_accuracy, v_loss) = labkit::test(&model, &mut test_loader)?;

        let report = labkit::EpochReport {
            epoch,
            cumulative_time: total_time,
            epoch_time,
            images_per_sec,
            validation_loss: v_loss,
            validation_accuracy: v_accuracy,
        }
        .record();
        report.print();
        let stop = early_stopping.record(v_accuracy);
        // --save-every N: rank 0 snapshots the run every N epochs.
        let state = labkit::TrainingState {
            epoch,
            total_time,
            learning_rate: args.base_lr,
            early_stopping: &early_stopping,
        };
        labkit::save_checkpoint(&args.run, &vs, state)?;
        if stop {
            break;
        }
    }
    Ok(())
}
