"""One PyTorch rank of the hand-written DDP benchmark (see src/bin/hand_ddp.rs).

The same MLP, first weights, batches, SGD and timing as the Rust ranks, under
torch.nn.parallel.DistributedDataParallel. Each bucket's all-reduce goes through a comm
hook that times it from its launch until its future completed (what tch-distributed's
timeline does for its DDP); the hook averages as PyTorch's own allreduce_hook does.
Prints one line `result {json}`; rank 0 writes its final weights to --weights-out.
Started by the runner with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set.
"""
import argparse
import json
import math
import statistics
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

WORLD_SIZE = 2


def now_us():
    return time.time() * 1e6


def initial(index, shape, rank):
    """The Rust rank's `initial`: first weights by formula, different on each rank."""
    numel = math.prod(shape)
    fan_in = shape[1] if len(shape) == 2 else 1
    phase = float(index * 10 + rank)
    return ((torch.arange(numel, dtype=torch.float32) * 0.7 + phase).sin() / math.sqrt(fan_in)).reshape(shape)


def batch(a, rank, step):
    """The Rust rank's `batch`."""
    offset = step * WORLD_SIZE + rank
    n = a.batch_size * a.features
    x = (torch.arange(n, dtype=torch.float32) * 0.01 + float(offset)).sin().reshape(a.batch_size, a.features)
    y = (torch.arange(a.batch_size, dtype=torch.int64) * 7 + offset) % a.classes
    return x, y


def mlp(widths):
    layers = []
    for i, (w_in, w_out) in enumerate(zip(widths, widths[1:])):
        layers.append(nn.Linear(w_in, w_out))
        if i + 2 < len(widths):
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def chrome(name, lane, start, end, rank, args=None):
    """A complete event as labkit::perfetto::chrome_event writes it."""
    e = {"name": name, "cat": "compute", "ph": "X", "ts": round(start, 1), "dur": round(max(end - start, 0.0), 1),
         "pid": rank, "tid": lane}
    if args:
        e["args"] = args
    return e


def overlap_of(backward, all_reduces):
    """The Rust rank's `overlap_of`."""
    if not all_reduces:
        return 0.0, 0.0
    start = min(a[0] for a in all_reduces)
    end = max(a[1] for a in all_reduces)
    if end <= start:
        return 0.0, 0.0
    inside = max(min(end, backward[1]) - max(start, backward[0]), 0.0)
    return inside / (end - start), max(end - backward[1], 0.0)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--features", type=int, default=256)
    p.add_argument("--hidden", default="512,512,512")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--bucket-cap-kb", type=int, default=256)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--timeout", type=int, default=120)
    p.add_argument("--weights-out")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=a.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()

    widths = [a.features] + [int(w) for w in a.hidden.split(",")] + [a.classes]
    model = mlp(widths)
    params = list(model.parameters())
    with torch.no_grad():
        for i, param in enumerate(params):
            param.copy_(initial(i, list(param.shape), rank))
    cap = a.bucket_cap_kb * 1024
    # PyTorch's first bucket: 1 MiB unless the cap is smaller (the Rust library's option).
    dist._DEFAULT_FIRST_BUCKET_BYTES = min(1 << 20, cap)
    ddp = DistributedDataParallel(model, bucket_cap_mb=cap / (1024 * 1024))

    reduced = []  # (bucket, launch, done, bytes) of this step
    lock = threading.Lock()

    def timed_allreduce(_state, bucket):
        start = now_us()
        buffer = bucket.buffer()
        buffer.div_(world)
        fut = dist.all_reduce(buffer, async_op=True).get_future()
        index, nbytes = bucket.index(), buffer.numel() * buffer.element_size()

        def done(f):
            with lock:
                reduced.append((index, start, now_us(), nbytes))
            return f.value()[0]

        return fut.then(done)

    ddp.register_comm_hook(None, timed_allreduce)
    # Rank 0's weights, made every rank's by DDP's constructor.
    start_weights = [param.detach().clone() for param in params]
    last_gradient = [0.0]

    def gradient_in(_param):
        last_gradient[0] = now_us()

    hooks = [param.register_post_accumulate_grad_hook(gradient_in) for param in params]
    opt = torch.optim.SGD(ddp.parameters(), lr=a.lr)
    loss_fn = nn.CrossEntropyLoss()

    times, overlaps, exposed, timelines, buckets = [], [], [], [], 0
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            dist.barrier()
        x, y = batch(a, rank, step)
        with lock:
            reduced.clear()
        started = time.perf_counter()
        t0 = now_us()
        opt.zero_grad()
        loss = loss_fn(ddp(x), y)
        b0 = now_us()
        loss.backward()
        synced = now_us()
        opt.step()
        stepped = now_us()
        seconds = time.perf_counter() - started
        b1 = last_gradient[0] if last_gradient[0] >= b0 else synced
        with lock:
            comm = sorted(reduced, key=lambda r: r[1])
        overlap, exposed_us = overlap_of((b0, b1), [(r[1], r[2]) for r in comm])
        if step >= a.warmup:
            buckets = max(buckets, len(comm))
            times.append(seconds)
            overlaps.append(overlap)
            exposed.append(exposed_us / 1e3)
            events = [chrome("forward", 0, t0, b0, rank), chrome("backward", 0, b0, b1, rank)]
            timelines.append(events)
            if synced > b1:
                events.append(chrome("waiting for gradients", 0, b1, synced, rank))
            events.append(chrome("optimizer step", 0, synced, stepped, rank))
            for index, start, done, nbytes in comm:
                events.append(chrome(f"all_reduce bucket {index}", 2 + index, start, done, rank,
                                     {"bucket": index, "bytes": nbytes}))
    for h in hooks:
        h.remove()
    if rank == 0 and a.weights_out:
        flat = torch.cat([param.detach().flatten() for param in params])
        with open(a.weights_out, "wb") as f:
            f.write(flat.numpy().astype("<f4").tobytes())
    result = {
        "rank": rank,
        "step_seconds": statistics.median(times),
        "overlap": statistics.median(overlaps),
        "exposed_ms": statistics.median(exposed),
        "buckets": buckets,
        "params": sum(param.numel() for param in params),
        "weights_moved": max((param - s).abs().max().item() for param, s in zip(params, start_weights)),
        # The timed step nearest the median (the Rust rank's choice).
        "timeline": timelines[min(range(len(times)), key=lambda i: abs(times[i] - statistics.median(times)))],
    }
    print("result " + json.dumps(result), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
