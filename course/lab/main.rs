//@ header
//! The master of the lab's 34 crates: the solution of the last step (step 16; step 11's
//! is the finished DLI lab) as a Rust program that compiles, with each step's change
//! marked for coursegen.
//!
//! `//@ step N` ... `//@ end` wraps the code that step N adds. In the block, `//@ todo`
//! starts what the starter of step N shows instead (its `TODO Step N` comments) and
//! `//@ old` the code from before step N. Those sections are commented out line by
//! line with `//| `, which coursegen strips, so this file stays the finished lab and
//! rustfmt, clippy and rust-analyzer work on it. Each crate gets its own header in
//! place of this one. Edit here, then `cargo run -p coursegen -- write` renders
//! steps/step_NN and solutions/step_NN (see crates/lab-course/src/markers.rs).
//@ end
//@ step 4
//@ old
//| // Some options are parsed before the steps that use them (step 4 reads the last ones).
//| #![allow(dead_code)]
//@ end
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use labkit::{DataLoader, LoaderOptions, RunOptions};
//@ step 12
use tch::nn;
//@ old
//| use tch::nn::{self, OptimizerConfig};
//@ end
//@ step 0
//@ step 2
use tch_distributed as dist;
//@ old
//| #[allow(unused_imports)] // `dist` is used from step 2 on
//| use tch_distributed as dist;
//@ end
//@ todo
//| // TODO Step 0: import the course's distributed module (the crate tch_distributed),
//| // under the short name the lab uses for torch.distributed.
//@ end

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
    //@ step 12
    /// Learning rate of SGD.
    //@ old
    //| /// Learning rate of SGD (no momentum).
    //@ end
    #[arg(long, default_value_t = 0.01, value_parser = labkit::learning_rate)]
    base_lr: f64,
    /// Validation accuracy at which training may stop early.
    #[arg(long, default_value_t = 0.85)]
    target_accuracy: f64,
    /// Stop once this many epochs in a row reach the target accuracy.
    #[arg(long, default_value_t = 2)]
    patience: usize,
    //@ step 1
    /// Number of nodes (machines) in the job.
    #[arg(long, default_value_t = 1, value_parser = labkit::node_count)]
    num_nodes: usize,
    /// Ranks per node: one per GPU (or CPU processes on a machine without GPUs).
    #[arg(long, default_value_t = 1, value_parser = labkit::ranks_per_node)]
    num_gpus: usize,
    /// Index of this node, from 0 to num_nodes - 1.
    #[arg(long, default_value_t = 0, value_parser = labkit::node_index)]
    node_id: usize,
    //@ todo
    //| // TODO Step 1: add the lab's three options --num-nodes, --num-gpus and --node-id,
    //| // with the lab's defaults (1, 1 and 0) and a help line each; labkit::ranks_per_node,
    //| // labkit::node_count and labkit::node_index (value parsers) reject impossible values.
    //@ end
    //@ step 7
    /// Normalise with SyncBatchNorm: BatchNorm statistics over all ranks' batches.
    #[arg(long)]
    sync_batch_norm: bool,
    //@ end
    //@ step 12
    /// SGD's momentum (PyTorch's): 0 is the DLI lab's plain SGD; above 0 the optimizer
    /// keeps a buffer per parameter, which checkpoints save with the weights.
    #[arg(long, default_value_t = 0.0, value_parser = labkit::momentum)]
    momentum: f64,
    //@ todo
    //| // TODO Step 12: add the option --momentum M (default 0, the DLI lab's plain SGD;
    //| // the value parser labkit::momentum rejects impossible values).
    //@ end
    //@ step 13
    /// Model parallelism: cut the model into one stage per rank and train it as a
    /// pipeline (GPipe), instead of a whole model per rank under DDP.
    #[arg(long)]
    pipeline: bool,
    /// With --pipeline: micro-batches each batch is split into (1: plain model
    /// parallelism, one stage at work at a time).
    #[arg(long, default_value_t = 4, value_parser = labkit::positive)]
    micro_batches: usize,
    //@ todo
    //| // TODO Step 13: add the options --pipeline (train the model cut into one stage per
    //| // rank) and --micro-batches N (default 4; 1 is plain model parallelism).
    //@ end
    //@ step 14
    /// Shard the model over the ranks (FSDP) instead of a whole replica on each (DDP);
    /// not with checkpoints (--save-every, --resume) nor --pipeline.
    #[arg(long, conflicts_with_all = ["save_every", "resume", "pipeline"])]
    fsdp: bool,
    //@ todo
    //| // TODO Step 14: --fsdp is parsed, but the model is not sharded yet (see worker).
    //| /// Shard the model over the ranks (FSDP) instead of a whole replica on each (DDP);
    //| /// not with checkpoints (--save-every, --resume) nor --pipeline.
    //| #[arg(long, conflicts_with_all = ["save_every", "resume", "pipeline"])]
    //| #[allow(dead_code)]
    //| fsdp: bool,
    //@ end
    //@ step 15
    //@ step 16
    /// Tensor parallelism: split each block's convolutions over T ranks (Megatron's
    /// column- and row-parallel layers); T must divide the world size W, and W/T
    /// replicas of the split model train under DDP (a 2-D mesh, "dp" x "tp").
    //@ todo
    //| // TODO Step 16: T may now be any divisor of the world size (say so here).
    //| /// Tensor parallelism: split each block's convolutions over T ranks (Megatron's
    //| /// column- and row-parallel layers) instead of a whole model per rank under DDP; T
    //| /// must be the world size.
    //@ old
    //| /// Tensor parallelism: split each block's convolutions over T ranks (Megatron's
    //| /// column- and row-parallel layers) instead of a whole model per rank under DDP; T
    //| /// must be the world size.
    //@ end
    #[arg(long, value_name = "T")]
    tensor_parallel: Option<usize>,
    //@ todo
    //| // TODO Step 15: add the option --tensor-parallel T (no default: without it, DDP as
    //| // before), the ranks each block's convolutions are split over.
    //@ end
    //@ step 2
    /// Every rank of the job, on every node (computed in main, not an option).
    #[arg(skip = 1usize)]
    world_size: usize,
    /// Where the ranks meet: rank 0's store (computed in main, not an option).
    #[arg(skip = dist::Init::env_or("localhost", 9956))]
    rendezvous: dist::Init,
    //@ todo
    //| // TODO Step 2: the program needs two values that are not options: the world size and
    //| // the rendezvous address. Keep them here (a field marked #[arg(skip = ...)] is not an option).
    //@ end
    #[command(flatten)]
    run: RunOptions,
}

fn main() -> ExitCode {
    //@ step 2
    let mut args = Args::parse();
    //@ old
    //| let args = Args::parse();
    //@ end
    args.run.apply();
    //@ step 1
    // A node outside the job, or one that cannot place its ranks on the devices asked
    // for, is an error before anything starts.
    args.run.check_node(args.node_id, args.num_nodes, args.num_gpus);
    //@ todo
    //| // TODO Step 1: reject a --node-id that is not below --num-nodes, and --num-gpus
    //| // ranks this node cannot place, before anything starts (args.run.check_node).
    //@ end
    //@ step 2
    // One rank per GPU on every node; rank 0's store at the lab's localhost:9956,
    // unless the environment (MASTER_ADDR, MASTER_PORT) says otherwise.
    args.world_size = args.num_nodes * args.num_gpus;
    args.rendezvous = dist::Init::env_or("localhost", 9956);
    labkit::announce_world(args.world_size, &args.rendezvous);
    //@ todo
    //| // TODO Step 2: compute the world size (how many ranks in the whole job) and the
    //| // rendezvous address (the lab's localhost:9956, unless MASTER_ADDR and MASTER_PORT
    //| // are set), and announce them with labkit::announce_world.
    //@ end
    //@ step 13
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
    //@ todo
    //| // TODO Step 13: with --pipeline, refuse what a pipeline cannot run before any rank
    //| // starts (labkit::check_pipeline).
    //@ end
    //@ step 15
    //@ step 16
    // Tensor parallelism splits every block over T ranks of a 2-D mesh, W/T replicas
    // of it under DDP (T must divide the world size); what cannot combine with it is
    // refused before any rank starts.
    //@ old
    //| // Tensor parallelism splits every block over the whole world (T = world size); what
    //| // cannot combine with it is refused before any rank starts.
    //@ end
    if let Some(tp_size) = args.tensor_parallel {
        let request = labkit::TensorParallelRequest {
            tp_size,
            world_size: args.world_size,
            pipeline: args.pipeline,
            fsdp: args.fsdp,
            sync_batch_norm: args.sync_batch_norm,
        };
        //@ step 16
        labkit::check_device_mesh(request, &args.run);
        //@ todo
        //| // TODO Step 16: on a 2-D mesh T need only divide the world size, and
        //| // --sync-batch-norm has a group to run over: labkit has a refusal for the mesh.
        //@ old
        //| labkit::check_tensor_parallel(request, &args.run);
        //@ end
    }
    //@ todo
    //| // TODO Step 15: with --tensor-parallel T, refuse before any rank starts what cannot
    //| // run: labkit::check_tensor_parallel says why (T not the world size, --pipeline,
    //| // --fsdp, --sync-batch-norm, checkpoints, a T the widths cannot split).
    //@ end
    //@ step 10
    // This invocation starts num_gpus copies of itself, one per local rank, and waits
    // for them; when one fails, the others are stopped.
    let result = dist::spawn(args.num_gpus, |local_rank| worker(local_rank, args));
    //@ todo
    //| // TODO Step 10: start this node's num_gpus ranks from this one invocation, each
    //| // running worker with its local rank, instead of relying on a launcher.
    //@ old
    //@ step 3
    //| // A launcher (the checker, or torchrun) starts one process per rank and tells each
    //| // its rank on this node in LOCAL_RANK.
    //| let result = match dist::local_rank() {
    //|     Ok(local_rank) => worker(local_rank.unwrap_or(0), args),
    //|     Err(e) => Err(e.into()),
    //| };
    //@ todo
    //| // TODO Step 3: a launcher starts this program once per rank and sets LOCAL_RANK
    //| // (unset means 0). Call worker with this process's local rank.
    //@ old
    //| let result = training(args);
    //@ end
    //@ end
    labkit::finish(result)
}

//@ step 3
/// Everything one rank does, from joining the job to its last epoch.
fn worker(local_rank: usize, args: Args) -> labkit::Result<()> {
    labkit::worker_started(local_rank);
    //@ todo
    //| // TODO Step 3: training moves into `worker(local_rank, args)`, which runs once per rank
    //| // and starts by saying so with labkit::worker_started(local_rank).
    //@ old
    //| /// The whole training run.
    //| fn training(args: Args) -> labkit::Result<()> {
    //@ end
    //@ step 4
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
    //@ todo
    //| // TODO Step 4: compute this process's global rank (from the node id, the ranks per
    //| // node and the local rank) and join the default process group: Gloo for CPU ranks,
    //| // NCCL for GPU ranks (args.run.backend(args.num_gpus) picks it), with the world size,
    //| // the rendezvous and --timeout.
    //@ end

    //@ step 7
    // Each rank computes on its own device: the GPU its local rank names, or the CPU.
    let device = args.run.device_for(local_rank, args.num_gpus);
    //@ todo
    //| // TODO Step 7: every rank uses the first GPU here; give each rank its own device.
    //@ old
    //| let device = args.run.device.first();
    //@ end

    let data = args.run.dataset_options();
    //@ step 5
    // One download per node: local rank 0 fetches (or generates) the files while the
    // other ranks wait at the barrier; then every rank reads them.
    if local_rank == 0 {
        labkit::prepare_dataset(&data)?;
    }
    dist::barrier()?;
    //@ todo
    //| // TODO Step 5: only one process per node should prepare the data set, and no rank
    //| // may read it before it is complete.
    //@ old
    //| labkit::prepare_dataset(&data)?;
    //@ end
    let (train_set, test_set) = labkit::load_dataset(&data, args.run.train_subset, args.run.test_subset)?;
    //@ step 13
    // --pipeline: each rank holds one stage of the model, not a whole model.
    if args.pipeline {
        return pipeline(&args, global_rank, device, &train_set, &test_set);
    }
    //@ step 15
    // --tensor-parallel: each rank holds a slice of every block, not a whole model.
    if let Some(tp_size) = args.tensor_parallel {
        //@ step 16
        // Fewer TP ranks than the world: a 2-D mesh, DDP over "dp" x TP over "tp".
        if tp_size < args.world_size {
            return tensor_parallel_2d(&args, tp_size, global_rank, device, &train_set, &test_set);
        }
        //@ todo
        //| // TODO Step 16: with T below the world size, train DDP x TP on a 2-D mesh
        //| // instead, in a function of its own (see the end of this file).
        //@ end
        return tensor_parallel(&args, tp_size, global_rank, device, &train_set, &test_set);
    }
    //@ todo
    //| // TODO Step 15: with --tensor-parallel T, train the model split over the ranks
    //| // instead, in a function of its own (see the end of this file).
    //@ end
    //@ todo
    //| // TODO Step 13: with --pipeline, train the model cut into stages instead, in a
    //| // function of its own: every rank walks the same batches (no split among ranks);
    //| // rank r builds only stage r (labkit::stage_layers, labkit::WideResNet::stage), no
    //| // DDP; a dist::Pipeline with --micro-batches; each epoch labkit::train_pipeline and
    //| // labkit::test_pipeline, whose loss and accuracy only the last stage holds: every
    //| // rank needs them. Rank 0 prints the epoch line and the bubble.
    //@ end

    //@ step 6
    // Each rank trains and validates on its own share of the data.
    let train_sampler =
        dist::DistributedSampler::with_defaults(train_set.len(), args.world_size, global_rank)?;
    let test_sampler = dist::DistributedSampler::with_defaults(test_set.len(), args.world_size, global_rank)?;
    //@ todo
    //| // TODO Step 6: every rank goes through the whole data set; give each rank its own
    //| // share of the training set and of the validation set (PyTorch's DistributedSampler).
    //@ old
    //| let train_sampler = labkit::RandomSampler::new(train_set.len());
    //| let test_sampler = labkit::SequentialSampler::new(test_set.len());
    //@ end
    let loader_options = LoaderOptions { batch_size: args.batch_size, device };
    let mut train_loader = DataLoader::new(&train_set, train_sampler, loader_options);
    let mut test_loader = DataLoader::new(&test_set, test_sampler, loader_options);

    let vs = nn::VarStore::new(device);
    //@ step 14
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
    //@ todo
    //| // TODO Step 14: with --fsdp (args.fsdp), each rank must hold 1/N of the model instead of
    //| // a whole replica. Make a dist::FullyShard on vs before the model; build the model with
    //| // labkit::WideResNet::try_new_wrapped, sharding each block as it is built
    //| // (fsdp.fully_shard(block, name)), then the root (fsdp.fully_shard(net, "")); build the
    //| // optimizer on this rank's shards (fsdp.shards()); and hand the loop
    //| // labkit::ShardedModel::new(model, fsdp). Without --fsdp, DDP as before.
    //@ old
    //@ step 7
    //| let norm = if args.sync_batch_norm { labkit::Norm::SyncBatchNorm } else { labkit::Norm::BatchNorm };
    //| let model = labkit::WideResNet::new(&vs.root(), &args.run, norm);
    //| // DDP starts every rank from rank 0's weights and averages the gradients over all
    //| // ranks during backward, so every rank takes the same step.
    //| let model = dist::DistributedDataParallel::new(model, &vs, dist::DdpOptions::default())?;
    //@ todo
    //| // TODO Step 7: wrap the model in DistributedDataParallel. Optional: a --sync-batch-norm
    //| // option that builds the model with labkit::Norm::SyncBatchNorm.
    //@ old
    //| let model = labkit::WideResNet::new(&vs.root(), &args.run, labkit::Norm::BatchNorm);
    //@ end
    //@ step 12
    //| // SGD, with --momentum's buffers held where a checkpoint can save them.
    //| let mut optimizer = labkit::Sgd::new(&vs, args.base_lr, args.momentum)?;
    //@ todo
    //| // TODO Step 12: tch's SGD keeps momentum out of the program's reach: build the
    //| // optimizer with labkit::Sgd::new (learning rate, --momentum) instead.
    //@ old
    //| let mut optimizer = nn::Sgd::default().build(&vs, args.base_lr)?;
    //@ end
    //@ end

    let mut early_stopping = labkit::EarlyStopping::new(args.target_accuracy, args.patience);
    //@ step 12
    // --resume: every rank loads the last checkpoint, if there is one, onto its own
    // device (PyTorch's map_location), the weights and the optimizer's momentum
    // buffers, and training continues at the epoch after it.
    let start = if args.run.checkpoint.resume {
        let checkpoint = labkit::load_checkpoint(&args.run, &vs, &mut optimizer, device)?;
        labkit::resume_after(checkpoint.as_ref(), &mut early_stopping)
    } else {
        labkit::Start::FRESH
    };
    //@ todo
    //| // TODO Step 12: labkit::resume does this out of sight; do it yourself: with --resume,
    //| // every rank loads the last checkpoint, weights and optimizer, onto its own device
    //| // (labkit::load_checkpoint) and the run continues after it (labkit::resume_after).
    //@ old
    //| // --resume: continue from the last checkpoint (weights, epoch, history), if any.
    //| let start = labkit::resume(&args.run, &vs, &mut early_stopping)?;
    //@ end
    let mut total_time = start.total_time;
    for epoch in start.epoch..args.epochs {
        //@ step 6
        // A new order every epoch, the same split among ranks.
        train_loader.sampler.set_epoch(epoch as u64);
        //@ todo
        //| // TODO Step 6 (6.5): the distributed sampler repeats its order every epoch unless
        //| // it is told which epoch this is.
        //@ end
        let t0 = Instant::now();
        labkit::train(&model, &mut optimizer, &mut train_loader)?;
        //@ step 8
        // The epoch ends when the slowest rank is done.
        dist::barrier()?;
        //@ todo
        //| // TODO Step 8: stop the clock only when every rank has finished the epoch.
        //@ end
        let epoch_time = t0.elapsed().as_secs_f64();
        total_time += epoch_time;
        let images_per_sec = labkit::images_per_sec(train_loader.len(), args.batch_size, epoch_time);
        //@ step 8
        // Rank 0 reports the job's throughput: the sum of every rank's.
        let mut images_per_sec_total = tch::Tensor::from(images_per_sec).to_device(device);
        dist::reduce(&mut images_per_sec_total, 0, dist::ReduceOp::Sum)?;
        let images_per_sec = images_per_sec_total.double_value(&[]);
        //@ todo
        //| // TODO Step 8: rank 0 must print the whole job's images/sec, the sum of every
        //| // rank's figure, collected on rank 0.
        //@ end

        let (v_accuracy, v_loss) = labkit::test(&model, &mut test_loader)?;
        //@ step 9
        // Each rank validated its own share: average over ranks (Gloo has no AVG, so sum
        // and divide by the world size). Every rank then holds the same metrics.
        let mut metrics = tch::Tensor::from_slice(&[v_accuracy, v_loss]).to_device(device);
        dist::all_reduce(&mut metrics, dist::ReduceOp::Sum)?;
        let metrics = metrics / args.world_size as f64;
        let (v_accuracy, v_loss) = (metrics.double_value(&[0]), metrics.double_value(&[1]));
        //@ todo
        //| // TODO Step 9: each rank validated only its share; every rank must end up with the
        //| // accuracy and loss averaged over all ranks.
        //@ end

        let report = labkit::EpochReport {
            epoch,
            cumulative_time: total_time,
            epoch_time,
            images_per_sec,
            validation_loss: v_loss,
            validation_accuracy: v_accuracy,
        }
        .record();
        //@ step 4
        if global_rank == 0 {
            report.print();
        }
        //@ todo
        //| // TODO Step 4: only rank 0 prints the epoch line.
        //@ old
        //| report.print();
        //@ end
        let stop = early_stopping.record(v_accuracy);
        //@ step 12
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
        //@ todo
        //| // TODO Step 12: labkit::save_checkpoint does this out of sight; do it yourself: with
        //| // --save-every N (labkit::checkpoint_due), write the checkpoint, weights and optimizer
        //| // (labkit::write_checkpoint), once, not once per rank; then every rank loads it back
        //| // onto its own device (labkit::load_checkpoint), but only once it is whole.
        //@ old
        //| // --save-every N: rank 0 snapshots the run every N epochs.
        //| let state = labkit::TrainingState {
        //|     epoch,
        //|     total_time,
        //|     learning_rate: args.base_lr,
        //|     early_stopping: &early_stopping,
        //| };
        //| labkit::save_checkpoint(&args.run, &vs, state)?;
        //@ end
        if stop {
            break;
        }
    }
    //@ step 11
    // The quick evaluation's verdict, once; then leave the job cleanly.
    if global_rank == 0 {
        labkit::print_summary(&args.run, args.target_accuracy, args.world_size);
    }
    dist::destroy_process_group()?;
    //@ todo
    //| // TODO Step 11: the quick evaluation: rank 0 prints the run's summary
    //| // (labkit::print_summary), and every rank leaves the process group.
    //@ end
    Ok(())
}
//@ step 13

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
//@ end
//@ step 15

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
//@ todo
//| // TODO Step 15: tensor parallelism, in a function of its own called from worker:
//| // - make a device mesh of one dimension named "tp" over the T ranks and take its group;
//| // - the ranks of a TP group compute one model together: which batches must each see?
//| //   (the pipeline's loaders of step 13 are a start);
//| // - build the model split over that group (labkit::WideResNet has a constructor for
//| //   it) and an optimizer on vs; why is there no DDP here?
//| // - train and validate as before; which ranks hold the loss and accuracy, and does
//| //   anything need averaging? Rank 0 prints the epoch line and the summary.
//@ end
//@ step 16

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
//@ todo
//| // TODO Step 16: DDP x TP on a 2-D mesh, in a function of its own called from worker:
//| // - lay the W ranks out as a mesh of two named dimensions, data-parallel replicas by
//| //   T TP ranks (which dimension must be innermost, so that TP peers are neighbours?),
//| //   and take each dimension's group and this rank's place along "dp";
//| // - which ranks must see the same images, and which disjoint ones? Shard the data
//| //   over one dimension only;
//| // - split the model over one group as in step 15, and wrap it in DDP over the
//| //   other (DistributedDataParallel has a constructor taking a group); with
//| //   --sync-batch-norm, over which ranks may BatchNorm's statistics be taken?
//| // - the validation metrics and the throughput: which ranks hold different shares,
//| //   and which group do you average over?
//@ end
