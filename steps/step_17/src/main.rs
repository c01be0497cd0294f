//! ddp-lab, step 17: Gradients averaged by hand.
//!
//! Look for `TODO Step 17`: those comments mark this step's work.
//! `cargo checker verify step 17` checks it; `cargo checker hint step 17` helps when you are stuck.
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use labkit::{DataLoader, LoaderOptions, RunOptions};
use tch::nn;
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
    /// Learning rate of SGD.
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
    /// Normalise with SyncBatchNorm: BatchNorm statistics over all ranks' batches.
    #[arg(long)]
    sync_batch_norm: bool,
    /// SGD's momentum (PyTorch's): 0 is the DLI lab's plain SGD; above 0 the optimizer
    /// keeps a buffer per parameter, which checkpoints save with the weights.
    #[arg(long, default_value_t = 0.0, value_parser = labkit::momentum)]
    momentum: f64,
    /// Model parallelism: cut the model into one stage per rank and train it as a
    /// pipeline (GPipe), instead of a whole model per rank under DDP.
    #[arg(long)]
    pipeline: bool,
    /// With --pipeline: micro-batches each batch is split into (1: plain model
    /// parallelism, one stage at work at a time).
    #[arg(long, default_value_t = 4, value_parser = labkit::positive)]
    micro_batches: usize,
    /// Shard the model over the ranks (FSDP) instead of a whole replica on each (DDP);
    /// not with checkpoints (--save-every, --resume) nor --pipeline.
    #[arg(long, conflicts_with_all = ["save_every", "resume", "pipeline"])]
    fsdp: bool,
    /// Tensor parallelism: split each block's convolutions over T ranks (Megatron's
    /// column- and row-parallel layers); T must divide the world size W, and W/T
    /// replicas of the split model train under DDP (a 2-D mesh, "dp" x "tp").
    #[arg(long, value_name = "T")]
    tensor_parallel: Option<usize>,
    /// Every rank of the job, on every node (computed in main, not an option).
    #[arg(skip = 1usize)]
    world_size: usize,
    /// Where the ranks meet: rank 0's store (computed in main, not an option).
    #[arg(skip = dist::Init::env_or("localhost", 9956))]
    rendezvous: dist::Init,
    #[command(flatten)]
    run: RunOptions,
}

fn main() -> ExitCode {
    let mut args = Args::parse();
    args.run.apply();
    // A node outside the job, or one that cannot place its ranks on the devices asked
    // for, is an error before anything starts.
    args.run.check_node(args.node_id, args.num_nodes, args.num_gpus);
    // One rank per GPU on every node; rank 0's store at the lab's localhost:9956,
    // unless the environment (MASTER_ADDR, MASTER_PORT) says otherwise.
    args.world_size = args.num_nodes * args.num_gpus;
    args.rendezvous = dist::Init::env_or("localhost", 9956);
    labkit::announce_world(args.world_size, &args.rendezvous);
    // A pipeline needs a stage per rank, at least two; what its ranks cannot share
    // (one checkpoint of a whole model, SyncBatchNorm) is refused before any rank starts.
    if args.pipeline {
        let request = labkit::PipelineRequest {
            stages: args.world_size,
            micro_batches: args.micro_batches,
            batch_size: args.batch_size,
            sync_batch_norm: args.sync_batch_norm,
        };
        labkit::check_pipeline(request, &args.run);
    }
    // Tensor parallelism splits every block over T ranks of a 2-D mesh, W/T replicas
    // of it under DDP (T must divide the world size); what cannot combine with it is
    // refused before any rank starts.
    if let Some(tp_size) = args.tensor_parallel {
        let request = labkit::TensorParallelRequest {
            tp_size,
            world_size: args.world_size,
            pipeline: args.pipeline,
            fsdp: args.fsdp,
            sync_batch_norm: args.sync_batch_norm,
        };
        labkit::check_device_mesh(request, &args.run);
    }
    // This invocation starts num_gpus copies of itself, one per local rank, and waits
    // for them; when one fails, the others are stopped.
    let result = dist::spawn(args.num_gpus, |local_rank| worker(local_rank, args));
    labkit::finish(result)
}

/// Everything one rank does, from joining the job to its last epoch.
fn worker(local_rank: usize, args: Args) -> labkit::Result<()> {
    labkit::worker_started(local_rank);
    // Ranks are numbered across nodes: node 0 holds ranks 0..num_gpus, node 1 the next
    // num_gpus, and so on.
    let global_rank = args.node_id * args.num_gpus + local_rank;
    let backend = args.run.backend(args.num_gpus);
    dist::init_process_group(
        backend,
        dist::InitOptions {
            init_method: args.rendezvous.clone(),
            world_size: Some(args.world_size),
            rank: Some(global_rank),
            timeout: args.run.timeout(),
        },
    )?;

    // Each rank computes on its own device: the GPU its local rank names, or the CPU.
    let device = args.run.device_for(local_rank, args.num_gpus);

    let data = args.run.dataset_options();
    // One download per node: local rank 0 fetches (or generates) the files while the
    // other ranks wait at the barrier; then every rank reads them.
    if local_rank == 0 {
        labkit::prepare_dataset(&data)?;
    }
    dist::barrier()?;
    let (train_set, test_set) = labkit::load_dataset(&data, args.run.train_subset, args.run.test_subset)?;
    // --pipeline: each rank holds one stage of the model, not a whole model.
    if args.pipeline {
        return pipeline(&args, global_rank, device, &train_set, &test_set);
    }
    // --tensor-parallel: each rank holds a slice of every block, not a whole model.
    if let Some(tp_size) = args.tensor_parallel {
        // Fewer TP ranks than the world: a 2-D mesh, DDP over "dp" x TP over "tp".
        if tp_size < args.world_size {
            return tensor_parallel_2d(&args, tp_size, global_rank, device, &train_set, &test_set);
        }
        return tensor_parallel(&args, tp_size, global_rank, device, &train_set, &test_set);
    }

    // Each rank trains and validates on its own share of the data.
    let train_sampler =
        dist::DistributedSampler::with_defaults(train_set.len(), args.world_size, global_rank)?;
    let test_sampler = dist::DistributedSampler::with_defaults(test_set.len(), args.world_size, global_rank)?;
    let loader_options = LoaderOptions { batch_size: args.batch_size, device };
    let mut train_loader = DataLoader::new(&train_set, train_sampler, loader_options);
    let mut test_loader = DataLoader::new(&test_set, test_sampler, loader_options);

    let vs = nn::VarStore::new(device);
    let norm = if args.sync_batch_norm { labkit::Norm::SyncBatchNorm } else { labkit::Norm::BatchNorm };
    let (model, mut optimizer): (Box<dyn labkit::Model>, labkit::Sgd) = if args.fsdp {
        // FSDP: each rank keeps 1/N of every parameter (its shards). A block's are
        // all-gathered before its forward and again before its backward, and freed
        // after; its gradients are reduce-scattered, averaged as DDP's. Each block is
        // sharded as it is built; the root, last, takes the rest (stem, classifier).
        let fsdp = dist::FullyShard::new(&vs, dist::FsdpOptions::default())?;
        let net = labkit::WideResNet::try_new_wrapped(&vs.root(), &args.run, norm, |block, name| {
            Ok(Box::new(fsdp.fully_shard(block, name)?))
        })?;
        let model = fsdp.fully_shard(net, "")?;
        // The optimizer steps on this rank's shards only, and keeps state (momentum
        // buffers) for them only: 1/N of the model's.
        let optimizer = labkit::Sgd::new(fsdp.shards()?, args.base_lr, args.momentum)?;
        (Box::new(labkit::ShardedModel::new(model, fsdp)), optimizer)
    } else {
        let model = labkit::WideResNet::new(&vs.root(), &args.run, norm);
        // DDP starts every rank from rank 0's weights and averages the gradients over all
        // ranks during backward, so every rank takes the same step.
        let model = dist::DistributedDataParallel::new(model, &vs, dist::DdpOptions::default())?;
        (Box::new(model), labkit::Sgd::new(&vs, args.base_lr, args.momentum)?)
    };

    let mut early_stopping = labkit::EarlyStopping::new(args.target_accuracy, args.patience);
    // --resume: every rank loads the last checkpoint, if there is one, onto its own
    // device (PyTorch's map_location), the weights and the optimizer's momentum
    // buffers, and training continues at the epoch after it.
    let start = if args.run.checkpoint.resume {
        let checkpoint = labkit::load_checkpoint(&args.run, &vs, &mut optimizer, device)?;
        labkit::resume_after(checkpoint.as_ref(), &mut early_stopping)
    } else {
        labkit::Start::FRESH
    };
    let mut total_time = start.total_time;
    for epoch in start.epoch..args.epochs {
        // A new order every epoch, the same split among ranks.
        train_loader.sampler.set_epoch(epoch as u64);
        let t0 = Instant::now();
        labkit::train(&model, &mut optimizer, &mut train_loader)?;
        // The epoch ends when the slowest rank is done.
        dist::barrier()?;
        let epoch_time = t0.elapsed().as_secs_f64();
        total_time += epoch_time;
        let images_per_sec = labkit::images_per_sec(train_loader.len(), args.batch_size, epoch_time);
        // Rank 0 reports the job's throughput: the sum of every rank's.
        let mut images_per_sec_total = tch::Tensor::from(images_per_sec).to_device(device);
        dist::reduce(&mut images_per_sec_total, 0, dist::ReduceOp::Sum)?;
        let images_per_sec = images_per_sec_total.double_value(&[]);

        let (v_accuracy, v_loss) = labkit::test(&model, &mut test_loader)?;
        // Each rank validated its own share: average over ranks (Gloo has no AVG, so sum
        // and divide by the world size). Every rank then holds the same metrics.
        let mut metrics = tch::Tensor::from_slice(&[v_accuracy, v_loss]).to_device(device);
        dist::all_reduce(&mut metrics, dist::ReduceOp::Sum)?;
        let metrics = metrics / args.world_size as f64;
        let (v_accuracy, v_loss) = (metrics.double_value(&[0]), metrics.double_value(&[1]));

        let report = labkit::EpochReport {
            epoch,
            cumulative_time: total_time,
            epoch_time,
            images_per_sec,
            validation_loss: v_loss,
            validation_accuracy: v_accuracy,
        }
        .record();
        if global_rank == 0 {
            report.print();
        }
        let stop = early_stopping.record(v_accuracy);
        // --save-every N: every rank holds the same weights and momentum buffers, so
        // rank 0 alone writes them.
        // No rank reads the checkpoint before it is whole (the barrier); then every rank
        // continues from what was saved, loaded onto its own device, as a restarted job
        // would.
        if labkit::checkpoint_due(&args.run, epoch) {
            if global_rank == 0 {
                let state = labkit::TrainingState {
                    epoch,
                    total_time,
                    learning_rate: args.base_lr,
                    early_stopping: &early_stopping,
                };
                labkit::write_checkpoint(&args.run, &vs, &optimizer, state)?;
            }
            dist::barrier()?;
            labkit::load_checkpoint(&args.run, &vs, &mut optimizer, device)?;
        }
        if stop {
            break;
        }
    }
    // The quick evaluation's verdict, once; then leave the job cleanly.
    if global_rank == 0 {
        labkit::print_summary(&args.run, args.target_accuracy, args.world_size);
    }
    dist::destroy_process_group()?;
    Ok(())
}

/// `--pipeline`: the model cut into stages, one per rank, trained as a pipeline of
/// micro-batches (GPipe) instead of under DDP.
fn pipeline(
    args: &Args,
    global_rank: usize,
    device: tch::Device,
    train_set: &labkit::data::Split,
    test_set: &labkit::data::Split,
) -> labkit::Result<()> {
    // Every rank walks the same batches in the same order (a sampler over a world of
    // one): the first stage needs their images, the last their labels.
    let loader_options = LoaderOptions { batch_size: args.batch_size, device };
    let train_sampler = dist::DistributedSampler::with_defaults(train_set.len(), 1, 0)?;
    let test_sampler = dist::DistributedSampler::with_defaults(test_set.len(), 1, 0)?;
    let mut train_loader = DataLoader::new(train_set, train_sampler, loader_options);
    let mut test_loader = DataLoader::new(test_set, test_sampler, loader_options);

    // Rank r builds stage r alone: its layers, with the uncut model's names and initial
    // values. Its optimizer steps only them (and keeps their momentum buffers).
    let vs = nn::VarStore::new(device);
    let layers = labkit::stage_layers(global_rank, args.world_size);
    let stage = labkit::WideResNet::stage(&vs.root(), &args.run, labkit::Norm::BatchNorm, layers);
    let pipeline = dist::Pipeline::new(stage, dist::default_group()?, args.micro_batches)?;
    let mut optimizer = labkit::Sgd::new(&vs, args.base_lr, args.momentum)?;

    let mut early_stopping = labkit::EarlyStopping::new(args.target_accuracy, args.patience);
    let mut total_time = 0.0;
    for epoch in 0..args.epochs {
        train_loader.sampler.set_epoch(epoch as u64);
        let t0 = Instant::now();
        let bubble = labkit::train_pipeline(&pipeline, &mut optimizer, &mut train_loader)?;
        dist::barrier()?;
        let epoch_time = t0.elapsed().as_secs_f64();
        total_time += epoch_time;
        // Every rank trained on the same images: the job's throughput is one rank's.
        let images_per_sec = labkit::images_per_sec(train_loader.len(), args.batch_size, epoch_time);

        // Only the last stage computes the loss and accuracy: it hands them to every rank.
        let (accuracy, loss) = labkit::test_pipeline(&pipeline, &mut test_loader)?.unwrap_or_default();
        let mut metrics = tch::Tensor::from_slice(&[accuracy, loss]).to_device(device);
        dist::broadcast(&mut metrics, args.world_size - 1)?;
        let (v_accuracy, v_loss) = (metrics.double_value(&[0]), metrics.double_value(&[1]));

        let report = labkit::EpochReport {
            epoch,
            cumulative_time: total_time,
            epoch_time,
            images_per_sec,
            validation_loss: v_loss,
            validation_accuracy: v_accuracy,
        }
        .record();
        if global_rank == 0 {
            report.print();
            bubble.print();
        }
        if early_stopping.record(v_accuracy) {
            break;
        }
    }
    if global_rank == 0 {
        labkit::print_summary(&args.run, args.target_accuracy, args.world_size);
    }
    dist::destroy_process_group()?;
    Ok(())
}

/// `--tensor-parallel T`: every block's convolutions split over the T ranks (Megatron's
/// column- and row-parallel layers), every rank on the same batches, no DDP.
fn tensor_parallel(
    args: &Args,
    tp_size: usize,
    global_rank: usize,
    device: tch::Device,
    train_set: &labkit::data::Split,
    test_set: &labkit::data::Split,
) -> labkit::Result<()> {
    // A mesh of one dimension, "tp": the whole world is one TP group.
    let mesh = dist::init_device_mesh(device, &[tp_size], &["tp"])?;
    let tp = mesh.get_group("tp")?;

    // TP peers compute one model together, so they must see the same images: a sampler
    // over a world of one, the same batches in the same order on every rank.
    let loader_options = LoaderOptions { batch_size: args.batch_size, device };
    let train_sampler = dist::DistributedSampler::with_defaults(train_set.len(), 1, 0)?;
    let test_sampler = dist::DistributedSampler::with_defaults(test_set.len(), 1, 0)?;
    let mut train_loader = DataLoader::new(train_set, train_sampler, loader_options);
    let mut test_loader = DataLoader::new(test_set, test_sampler, loader_options);

    // Each block's first conv and its BatchNorm hold 1/T of the output channels
    // (column-parallel), its second conv 1/T of the input channels (row-parallel, its
    // partial sums all-reduced); the rest is replicated. No DDP: no rank holds a replica
    // to average, the all-reduces inside each block make the whole step. The optimizer
    // steps each rank's slices and its replicated layers.
    let vs = nn::VarStore::new(device);
    let model = labkit::WideResNet::tensor_parallel(&vs, &args.run, &tp)?;
    let mut optimizer = labkit::Sgd::new(&vs, args.base_lr, args.momentum)?;

    let mut early_stopping = labkit::EarlyStopping::new(args.target_accuracy, args.patience);
    let mut total_time = 0.0;
    for epoch in 0..args.epochs {
        train_loader.sampler.set_epoch(epoch as u64);
        let t0 = Instant::now();
        labkit::train(&model, &mut optimizer, &mut train_loader)?;
        dist::barrier()?;
        let epoch_time = t0.elapsed().as_secs_f64();
        total_time += epoch_time;
        // Every rank trained on the same images: the job's throughput is one rank's.
        let images_per_sec = labkit::images_per_sec(train_loader.len(), args.batch_size, epoch_time);

        // Every TP rank validated the whole set with the whole model's output (the
        // all-reduces end each block): every rank holds the same loss and accuracy,
        // nothing to average.
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
        if global_rank == 0 {
            report.print();
        }
        if early_stopping.record(v_accuracy) {
            break;
        }
    }
    if global_rank == 0 {
        labkit::print_summary(&args.run, args.target_accuracy, args.world_size);
    }
    dist::destroy_process_group()?;
    Ok(())
}

/// `--tensor-parallel T` on more than T ranks: the world laid out as a 2-D mesh of W/T
/// rows by T columns, "dp" x "tp". Each row is a TP group splitting every block (step
/// 15); each column a DP group of replicas holding the same slices, trained under DDP.
fn tensor_parallel_2d(
    args: &Args,
    tp_size: usize,
    global_rank: usize,
    device: tch::Device,
    train_set: &labkit::data::Split,
    test_set: &labkit::data::Split,
) -> labkit::Result<()> {
    // PyTorch's layout: ranks in a [W/T, T] grid, the last dimension fastest, so TP
    // peers are neighbours (on 4 ranks TP groups {0,1},{2,3}, DP groups {0,2},{1,3}).
    let dp_size = args.world_size / tp_size;
    let mesh = dist::init_device_mesh(device, &[dp_size, tp_size], &["dp", "tp"])?;
    let (dp, tp) = (mesh.get_group("dp")?, mesh.get_group("tp")?);
    let dp_rank = mesh.get_local_rank("dp")?;

    // The data is sharded over the DP dimension only: TP peers (one row) compute one
    // model together and must see the same images, DP peers (one column) disjoint ones.
    let loader_options = LoaderOptions { batch_size: args.batch_size, device };
    let train_sampler = dist::DistributedSampler::with_defaults(train_set.len(), dp_size, dp_rank)?;
    let test_sampler = dist::DistributedSampler::with_defaults(test_set.len(), dp_size, dp_rank)?;
    let mut train_loader = DataLoader::new(train_set, train_sampler, loader_options);
    let mut test_loader = DataLoader::new(test_set, test_sampler, loader_options);

    // The model split over the TP group as in step 15; --sync-batch-norm takes its
    // statistics over the DP group (never the world: TP peers hold the same batch and
    // other channels). DDP over the DP group averages each slice's gradients with the
    // replicas holding the same slice; its broadcast starts them from DP rank 0's.
    let vs = nn::VarStore::new(device);
    let norm = if args.sync_batch_norm {
        labkit::TensorParallelNorm::SyncBatchNorm(dp.clone())
    } else {
        labkit::TensorParallelNorm::PerRank
    };
    let model = labkit::WideResNet::tensor_parallel_with(&vs, &args.run, &tp, norm)?;
    let model =
        dist::DistributedDataParallel::with_group(model, &vs, dp.clone(), dist::DdpOptions::default())?;
    let mut optimizer = labkit::Sgd::new(&vs, args.base_lr, args.momentum)?;

    let mut early_stopping = labkit::EarlyStopping::new(args.target_accuracy, args.patience);
    let mut total_time = 0.0;
    for epoch in 0..args.epochs {
        train_loader.sampler.set_epoch(epoch as u64);
        let t0 = Instant::now();
        labkit::train(&model, &mut optimizer, &mut train_loader)?;
        dist::barrier()?;
        let epoch_time = t0.elapsed().as_secs_f64();
        total_time += epoch_time;
        // Each DP replica trained on its own share, its TP ranks on the same images: the
        // job's throughput is one rank's times the replicas.
        let images_per_sec =
            dp_size as f64 * labkit::images_per_sec(train_loader.len(), args.batch_size, epoch_time);

        // Each replica validated its DP share (TP peers the same one, with the whole
        // model's output): average over the DP group, as step 9 does over the world.
        let (v_accuracy, v_loss) = labkit::test(&model, &mut test_loader)?;
        let mut metrics = tch::Tensor::from_slice(&[v_accuracy, v_loss]).to_device(device);
        dp.all_reduce(&mut metrics, dist::ReduceOp::Sum)?;
        let metrics = metrics / dp_size as f64;
        let (v_accuracy, v_loss) = (metrics.double_value(&[0]), metrics.double_value(&[1]));

        let report = labkit::EpochReport {
            epoch,
            cumulative_time: total_time,
            epoch_time,
            images_per_sec,
            validation_loss: v_loss,
            validation_accuracy: v_accuracy,
        }
        .record();
        if global_rank == 0 {
            report.print();
        }
        if early_stopping.record(v_accuracy) {
            break;
        }
    }
    if global_rank == 0 {
        labkit::print_summary(&args.run, args.target_accuracy, args.world_size);
    }
    dist::destroy_process_group()?;
    Ok(())
}
// TODO Step 17: Gradients averaged by hand.
