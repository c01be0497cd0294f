"""The finished lab (solutions/step_11) written in PyTorch: the reference the `lab`
benchmark (src/bin/lab.rs) runs side by side with the Rust program.

Same options (names and defaults), same model (wideresnet.py), PyTorch's own
DistributedSampler, SGD without momentum, cross-entropy, the same validation metrics
(averaged over ranks with all_reduce), the same images/sec (per-rank figures summed on
rank 0 with reduce) and the same epoch line, character for character.

Data: reads the four gz IDX files that the Rust lab reads, from the same directory
(it never downloads or generates them: run the Rust lab, or the benchmark, once).
Like labkit, it holds each split in memory as one uint8 tensor on the training device
and gathers every batch by index, so both sides compare the framework, not a loader.

    python lab_reference.py --num-gpus 2 --width narrow --threads 1 --train-subset 4000

On GPUs: one GPU per rank over NCCL, as the Rust lab; `--share-gpus` lets more ranks
than GPUs share them (local rank mod GPUs) over Gloo on CUDA tensors, as the Rust
lab's option of the same name. `--compile [MODE]` runs `torch.compile(model)` after the
DDP wrap: what a PyTorch user would try next, and the benchmark's third column.
"""
import argparse
import gzip
import math
import os
import struct
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler

from wideresnet import parse_widths, wide_resnet

FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
# labkit's default generated stand-in (GenerateOptions::default().dir_name()).
GENERATED_DIR = "generated-seed0-60000-10000"
# torch.compile's modes ("default" is torch.compile(model) with no mode).
COMPILE_MODES = ["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]


class BadInput(Exception):
    """Bad options or missing data: exit status 2, as the Rust lab."""


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Trains the lab's WideResNet on Fashion-MNIST (PyTorch reference).")
    p.add_argument("--batch-size", type=int, default=32, help="images per batch, on each rank")
    p.add_argument("--epochs", type=int, default=40, help="most epochs to train")
    p.add_argument("--base-lr", type=float, default=0.01, help="learning rate of SGD (no momentum)")
    p.add_argument("--target-accuracy", type=float, default=0.85)
    p.add_argument("--patience", type=int, default=2)
    p.add_argument("--num-nodes", type=int, default=1)
    p.add_argument("--num-gpus", type=int, default=1)
    p.add_argument("--node-id", type=int, default=0)
    p.add_argument("--sync-batch-norm", action="store_true")
    p.add_argument("--width", default="lab")
    p.add_argument("--train-subset", type=int)
    p.add_argument("--test-subset", type=int)
    p.add_argument("--data-dir", default="data")
    p.add_argument("--dataset", default="auto", choices=["auto", "real", "generated"])
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "gpu"])
    p.add_argument("--threads", type=int)
    p.add_argument("--timeout", type=int, default=60)
    p.add_argument("--amp", default="off", choices=["off", "bf16"])
    p.add_argument("--channels-last", action="store_true")
    p.add_argument(
        "--share-gpus",
        action="store_true",
        help="with --device cuda: ranks share this node's GPUs (local rank mod GPUs) over Gloo when there are fewer GPUs than ranks",
    )
    p.add_argument(
        "--compile",
        nargs="?",
        const="default",
        default=None,
        choices=COMPILE_MODES,
        metavar="MODE",
        help="torch.compile the model after the DDP wrap; MODE is torch.compile's mode (default: default)",
    )
    a = p.parse_args(argv)
    try:
        a.widths = parse_widths(a.width)
    except ValueError as e:
        p.error(str(e))
    if a.batch_size < 1 or a.num_gpus < 1 or a.num_nodes < 1:
        p.error("--batch-size, --num-gpus and --num-nodes must be at least 1")
    return a


def data_dir(a):
    real = a.data_dir
    generated = os.path.join(a.data_dir, GENERATED_DIR)
    if a.dataset == "real":
        return real
    if a.dataset == "generated":
        return generated
    present = all(os.path.isfile(os.path.join(real, f)) for pair in FILES.values() for f in pair)
    return real if present else generated


def read_idx(path, magic, dims):
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise BadInput(f"cannot read {path} ({e}): run the Rust lab (or the bench runner) once to prepare the data")
    header = 4 + 4 * dims
    values = struct.unpack(f">{1 + dims}I", raw[:header])
    if values[0] != magic or len(raw) - header != math.prod(values[1:]):
        raise BadInput(f"{path} is not an IDX file of the expected kind")
    return torch.frombuffer(bytearray(raw[header:]), dtype=torch.uint8).view(*values[1:])


def load_split(directory, which, subset, device):
    images_file, labels_file = FILES[which]
    images = read_idx(os.path.join(directory, images_file), 2051, 3).unsqueeze(1)
    labels = read_idx(os.path.join(directory, labels_file), 2049, 1).long()
    if subset is not None:
        images, labels = images[:subset], labels[:subset]
    # Resident on the training device: a batch is one index_select there.
    return images.to(device), labels.to(device)


def batches(images, labels, indices, batch_size):
    index = torch.tensor(indices, dtype=torch.long, device=images.device)
    for start in range(0, len(indices), batch_size):
        chunk = index[start:start + batch_size]
        yield images.index_select(0, chunk).float() / 255.0, labels.index_select(0, chunk)


def check_gpus(a, gpus):
    """labkit's check_gpus (options.rs): --device cuda needs a GPU per rank of this
    node, unless the ranks may share them. Raises BadInput (exit 2) with what to do."""
    if a.device not in ("cuda", "gpu") or 0 < a.num_gpus <= gpus:
        return
    if gpus == 0:
        raise BadInput(
            "--device cuda, but torch sees no GPU on this node: run on the CPU (--device cpu, or --device auto, which uses GPUs where there are enough)"
        )
    if not a.share_gpus:
        raise BadInput(
            f"--device cuda with {a.num_gpus} ranks on this node, which has {gpus} GPU(s) (NCCL needs one per rank): "
            f"ask for at most {gpus} rank(s) per node (--num-gpus {gpus}), or add --share-gpus to let ranks share a GPU (Gloo on CUDA tensors)"
        )


def rank_device(a, local_rank, gpus):
    if a.device in ("cuda", "gpu") or (a.device == "auto" and gpus >= a.num_gpus):
        # More ranks than GPUs only gets here with --share-gpus: the ranks take them in turn.
        return torch.device("cuda", local_rank % gpus if gpus else local_rank)
    return torch.device("cpu")


def backend(a, device, gpus):
    """NCCL for a GPU per rank, Gloo on the CPU and for ranks sharing a GPU (NCCL
    refuses two ranks on one GPU); labkit's RunOptions::backend."""
    if device.type == "cuda" and not (a.share_gpus and a.num_gpus > gpus):
        return "nccl"
    return "gloo"


def autocast(a, device):
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=a.amp == "bf16")


def train(a, model, optimizer, loss_fn, images, labels, sampler, device):
    model.train()
    memory = torch.channels_last if a.channels_last else torch.contiguous_format
    for x, y in batches(images, labels, list(sampler), a.batch_size):
        x = x.contiguous(memory_format=memory)
        with autocast(a, device):
            loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def test(a, model, loss_fn, images, labels, sampler, device):
    model.eval()
    correct, total, loss_sum, count = 0, 0, 0.0, 0
    with torch.no_grad():
        for x, y in batches(images, labels, list(sampler), a.batch_size):
            with autocast(a, device):
                logits = model(x)
            loss_sum += loss_fn(logits.float(), y).item()
            correct += (logits.argmax(-1) == y).sum().item()
            total += len(y)
            count += 1
    return (correct / total if total else 0.0), (loss_sum / count if count else 0.0)


def worker(local_rank, a):
    print(f"Worker started: local rank {local_rank} (pid {os.getpid()})", flush=True)
    if a.threads:
        torch.set_num_threads(a.threads)
    rank = a.node_id * a.num_gpus + local_rank
    gpus = torch.cuda.device_count()
    device = rank_device(a, local_rank, gpus)
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = True
    dist.init_process_group(
        backend(a, device, gpus),
        init_method=f"tcp://{a.master_addr}:{a.master_port}",
        world_size=a.world_size,
        rank=rank,
        timeout=timedelta(seconds=a.timeout),
    )
    dist.barrier()
    directory = data_dir(a)
    train_images, train_labels = load_split(directory, "train", a.train_subset, device)
    test_images, test_labels = load_split(directory, "test", a.test_subset, device)
    train_sampler = DistributedSampler(range(len(train_labels)), num_replicas=a.world_size, rank=rank)
    test_sampler = DistributedSampler(range(len(test_labels)), num_replicas=a.world_size, rank=rank)
    train_batches = math.ceil(len(train_sampler) / a.batch_size)

    model = wide_resnet(a.widths)
    if a.sync_batch_norm:
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model = model.to(device)
    if a.channels_last:
        model = model.to(memory_format=torch.channels_last)
    model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    if a.compile:
        # After the wrap, as PyTorch recommends for DDP (its optimizer splits graphs at buckets).
        # Dynamo compiles the blocks as frames of their own here (DDP's forward breaks the
        # graph), once per instance and mode: past the default limit of 8 recompilations the
        # rest silently ran eagerly (seen on CPU, torch 2.11), so the limit is raised.
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
        model = torch.compile(model, mode=None if a.compile == "default" else a.compile)
    optimizer = torch.optim.SGD(model.parameters(), lr=a.base_lr)
    loss_fn = nn.CrossEntropyLoss()

    history, reports, total_time = [], [], 0.0
    for epoch in range(a.epochs):
        train_sampler.set_epoch(epoch)
        t0 = time.perf_counter()
        train(a, model, optimizer, loss_fn, train_images, train_labels, train_sampler, device)
        dist.barrier()
        epoch_time = time.perf_counter() - t0
        total_time += epoch_time
        images_per_sec = torch.tensor(train_batches * a.batch_size / epoch_time, dtype=torch.float64, device=device)
        dist.reduce(images_per_sec, 0, op=dist.ReduceOp.SUM)
        v_accuracy, v_loss = test(a, model, loss_fn, test_images, test_labels, test_sampler, device)
        metrics = torch.tensor([v_accuracy, v_loss], dtype=torch.float64, device=device)
        dist.all_reduce(metrics, op=dist.ReduceOp.SUM)
        v_accuracy, v_loss = (metrics / a.world_size).tolist()
        reports.append((images_per_sec.item(), v_accuracy, total_time))
        if rank == 0:
            print(
                f"Epoch = {epoch:2d}: Cumulative Time = {total_time:5.3f}, Epoch Time = {epoch_time:5.3f}, "
                f"Images/sec = {images_per_sec.item()}, Validation Loss = {v_loss:5.3f}, "
                f"Validation Accuracy = {v_accuracy:5.3f}",
                flush=True,
            )
        history.append(v_accuracy)
        if a.patience > 0 and len(history) >= a.patience and all(x >= a.target_accuracy for x in history[-a.patience:]):
            break
    if rank == 0:
        print_summary(a, reports)
    dist.destroy_process_group()


def print_summary(a, reports):
    """labkit's quick-evaluation line (report.rs, Summary::line)."""
    steady = [r[0] for r in reports[1:]] or [r[0] for r in reports]
    ips = sum(steady) / len(steady) if steady else 0.0
    best = max((r[1] for r in reports), default=0.0)
    reached = next((i for i, r in enumerate(reports) if r[1] >= a.target_accuracy), None)
    verdict = f"reached at epoch {reached}" if reached is not None else "NOT reached"
    plural = lambda n: "" if n == 1 else "s"  # noqa: E731
    print(
        f"Quick evaluation: {a.world_size} rank{plural(a.world_size)}, {len(reports)} epoch{plural(len(reports))} "
        f"in {reports[-1][2] if reports else 0.0:.1f} s, {ips:.1f} images/sec; best validation accuracy {best:.3f}, "
        f"target {a.target_accuracy:.3f} {verdict}",
        flush=True,
    )


def main(argv=None):
    a = parse_args(argv)
    a.world_size = a.num_nodes * a.num_gpus
    a.master_addr = os.environ.get("MASTER_ADDR", "localhost")
    a.master_port = int(os.environ.get("MASTER_PORT", "9956"))
    print(f"World size = {a.world_size}; rendezvous at {a.master_addr}:{a.master_port}", flush=True)
    try:
        # Fail early, in the parent, on too few GPUs and missing data (exit 2 like the Rust lab).
        check_gpus(a, torch.cuda.device_count())
        directory = data_dir(a)
        for pair in FILES.values():
            for f in pair:
                if not os.path.isfile(os.path.join(directory, f)):
                    raise BadInput(
                        f"{os.path.join(directory, f)} is missing: run the Rust lab (or the bench runner) once to prepare the data"
                    )
        mp.spawn(worker, args=(a,), nprocs=a.num_gpus)
    except BadInput as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
