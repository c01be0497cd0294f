"""One PyTorch rank of the Beyond-DDP benchmark (see src/bin/beyond.rs).

Trains the lab's WideResNet (wideresnet.py) on CPU ranks over Gloo in one of four
ways, as the Rust rank does with tch-distributed:

- `ddp`: DistributedDataParallel, a batch of --batch-size per rank;
- `fsdp`: FSDP2, `torch.distributed.fsdp.fully_shard` on each residual block, then on
  the root (FSDP2's defaults: reshard after forward, float32);
- `pipeline`: `torch.distributed.pipelining`, the model cut after block3 into two
  stages (one per rank), ScheduleGPipe over --micro-batches; the first stage reads a
  batch of --batch-size x world size (the job's batch, as the other modes' together).
- `tp`: tensor parallelism written by hand (PyTorch's TP styles cover Linear only): in
  each block the first conv column-parallel (its output channels split, Megatron's f
  on the block's input), its BatchNorm on this rank's channels, the second conv
  row-parallel (its input channels split, Megatron's g summing the partial outputs);
  stem, shortcuts, second BatchNorms and head replicated. Every rank takes the job's
  batch. f and g are torch.autograd.Functions over torch.distributed, and count the
  bytes they send.

Every step: forward, cross-entropy, backward, SGD (lr 0.01, no momentum). Prints one
line `result {json}`: seconds per timed step, and memory measured from the process
(VmHWM, the peak resident set, from /proc/self/status) and from the parameters and
gradients this rank holds; for `tp`, the bytes sent per step. Started by the runner with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set.
"""
import argparse
import json
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn

from lab_reference import FILES, read_idx
from wideresnet import parse_widths, wide_resnet

# Layers 0..CUT of the nn.Sequential (stem, block1, block2, pool, block3) form the
# first stage, as labkit's WideResNet::stage(0..5) does.
CUT = 5


def status_kb(field):
    """A field of /proc/self/status in bytes (VmHWM, VmRSS), or None off Linux."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def reset_peak_rss():
    """Restarts VmHWM from the current resident set (Linux >= 4.0); False if refused."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def load_images(directory, n):
    # Copies, so that the whole decompressed files are freed.
    images = read_idx(os.path.join(directory, FILES["train"][0]), 2051, 3)[:n].unsqueeze(1).clone()
    labels = read_idx(os.path.join(directory, FILES["train"][1]), 2049, 1)[:n].long()
    return images, labels


def param_bytes(params):
    total = 0
    for p in params:
        local = p.to_local() if hasattr(p, "to_local") else p
        total += local.numel() * local.element_size()
    return total


def grad_bytes(params):
    return param_bytes([p.grad for p in params if p.grad is not None])


# Bytes this rank sent in f's and g's all-reduces, as ring all-reduce moves them
# (2 (n-1)/n of the tensor per rank: the Rust runner's cost model).
SENT = [0.0]


def all_reduce_counted(t, group):
    n = dist.get_world_size(group)
    SENT[0] += 2 * (n - 1) / n * t.numel() * t.element_size()
    dist.all_reduce(t, group=group)
    return t


class CopyToRegion(torch.autograd.Function):
    """Megatron's f: identity forward, gradient summed over the group backward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return all_reduce_counted(grad.contiguous().clone(), ctx.group), None


class ReduceFromRegion(torch.autograd.Function):
    """Megatron's g: summed over the group forward, gradient passed on backward (not
    dist's autograd all_reduce, whose backward all-reduces again)."""

    @staticmethod
    def forward(ctx, x, group):
        return all_reduce_counted(x.contiguous().clone(), group)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class TensorParallelBlock(nn.Module):
    """A wideresnet Block split over `group`, as labkit's TensorParallelBlock: conv1 and
    BN1 keep this rank's output channels, conv2 its input channels; the rest whole."""

    def __init__(self, block, group):
        super().__init__()
        n, r = dist.get_world_size(group), dist.get_rank(group)
        (self.conv1, self.bn1, _), self.dropout, (self.conv2, self.bn2, _) = [
            block.main[0], block.main[1], block.main[2]]
        self.shortcut, self.group = block.shortcut, group
        with torch.no_grad():
            self.conv1.weight = nn.Parameter(self.conv1.weight.chunk(n, 0)[r].clone())
            for name in ("weight", "bias"):
                setattr(self.bn1, name, nn.Parameter(getattr(self.bn1, name).chunk(n, 0)[r].clone()))
            for name in ("running_mean", "running_var"):
                setattr(self.bn1, name, getattr(self.bn1, name).chunk(n, 0)[r].clone())
            self.bn1.num_features //= n
            self.conv2.weight = nn.Parameter(self.conv2.weight.chunk(n, 1)[r].clone())

    def forward(self, x):
        h = torch.relu(self.bn1(self.conv1(CopyToRegion.apply(x, self.group))))
        partial = self.conv2(self.dropout(h))
        main = torch.relu(self.bn2(ReduceFromRegion.apply(partial, self.group)))
        return main + self.shortcut(x)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["ddp", "fsdp", "pipeline", "tp"], required=True)
    p.add_argument("--width", default="narrow")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--micro-batches", type=int, default=4)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--timeout", type=int, default=120)
    p.add_argument("--data-dir", required=True)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=a.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    job_batch = a.batch_size * world
    steps = a.warmup + a.steps
    # Only the images the run trains on, as the Rust rank loads them.
    images, labels = load_images(a.data_dir, min(60000, steps * job_batch))

    def batch(step, first, size):
        # Images [first, first + size) of the step's job batch, wrapping around the set.
        start = (step * job_batch + first) % len(labels)
        index = torch.arange(start, start + size) % len(labels)
        return images[index].float().div_(255), labels[index]

    torch.manual_seed(0)
    model = wide_resnet(parse_widths(a.width))
    loss_fn = nn.CrossEntropyLoss()
    if a.mode == "ddp":
        model = nn.parallel.DistributedDataParallel(model)
        params = list(model.parameters())
    elif a.mode == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (world,))
        for layer in model:
            if layer.__class__.__name__ == "Block":
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        params = list(model.parameters())
    elif a.mode == "tp":
        group = dist.group.WORLD
        # Every rank's whole model is TP rank 0's (src_data_rank=0), then split.
        with torch.no_grad():
            for t in list(model.parameters()) + list(model.buffers()):
                dist.broadcast(t, 0, group=group)
        for i, layer in enumerate(model):
            if layer.__class__.__name__ == "Block":
                model[i] = TensorParallelBlock(layer, group)
        params = list(model.parameters())
    else:
        from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

        if world != 2:
            raise SystemExit("the pipeline mode cuts the model into 2 stages: run it on 2 ranks")
        layers = list(model.children())
        model = nn.Sequential(*(layers[:CUT] if rank == 0 else layers[CUT:]))
        stage = PipelineStage(model, rank, world, torch.device("cpu"))
        # ScheduleGPipe scales the gradients by 1/micro-batches: the batch's mean loss.
        schedule = ScheduleGPipe(stage, n_microbatches=a.micro_batches, loss_fn=loss_fn)
        params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=0.01)

    def step(i):
        opt.zero_grad()
        if a.mode == "tp":
            # TP peers compute on the same images: the job's batch on each.
            x, y = batch(i, 0, job_batch)
            loss_fn(model(x), y).backward()
        elif a.mode == "pipeline":
            x, y = batch(i, 0, job_batch)
            if rank == 0:
                schedule.step(x)
            else:
                schedule.step(target=y, losses=[])
        else:
            x, y = batch(i, rank * a.batch_size, a.batch_size)
            loss_fn(model(x), y).backward()
        opt.step()

    peak_before = status_kb("VmHWM")
    reset = reset_peak_rss()
    rss_start = status_kb("VmRSS")
    for i in range(a.warmup):
        step(i)
    dist.barrier()
    SENT[0] = 0.0
    start = time.perf_counter()
    for i in range(a.warmup, steps):
        step(i)
    sent = SENT[0]
    dist.barrier()
    seconds = (time.perf_counter() - start) / a.steps
    peak_training = status_kb("VmHWM")
    result = {
        "step_seconds": seconds,
        "peak_rss": max(peak_before or 0, peak_training or 0),
        "training_peak_rss": peak_training if reset else None,
        "rss_start": rss_start,
        "param_bytes": param_bytes(params),
        "grad_bytes": grad_bytes(params),
        "sent_bytes_per_step": sent / a.steps if a.mode == "tp" else None,
        "threads": torch.get_num_threads(),
    }
    print("result " + json.dumps(result), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
