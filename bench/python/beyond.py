"""One PyTorch rank of the Beyond-DDP benchmark (see src/bin/beyond.rs).

Trains the lab's WideResNet (wideresnet.py) on CPU ranks over Gloo in one of three
ways, as the Rust rank does with tch-distributed:

- `ddp`: DistributedDataParallel, a batch of --batch-size per rank;
- `fsdp`: FSDP2, `torch.distributed.fsdp.fully_shard` on each residual block, then on
  the root (FSDP2's defaults: reshard after forward, float32);
- `pipeline`: `torch.distributed.pipelining`, the model cut after block3 into two
  stages (one per rank), ScheduleGPipe over --micro-batches; the first stage reads a
  batch of --batch-size x world size (the job's batch, as the other modes' together).

Every step: forward, cross-entropy, backward, SGD (lr 0.01, no momentum). Prints one
line `result {json}`: seconds per timed step, and memory measured from the process
(VmHWM, the peak resident set, from /proc/self/status) and from the parameters this
rank holds. Started by the runner with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set.
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


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["ddp", "fsdp", "pipeline"], required=True)
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
        if a.mode == "pipeline":
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
    start = time.perf_counter()
    for i in range(a.warmup, steps):
        step(i)
    dist.barrier()
    seconds = (time.perf_counter() - start) / a.steps
    peak_training = status_kb("VmHWM")
    result = {
        "step_seconds": seconds,
        "peak_rss": max(peak_before or 0, peak_training or 0),
        "training_peak_rss": peak_training if reset else None,
        "rss_start": rss_start,
        "param_bytes": param_bytes(params),
        "threads": torch.get_num_threads(),
    }
    print("result " + json.dumps(result), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
