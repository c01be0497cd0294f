"""One PyTorch rank of the DDP training-step benchmark (see src/bin/ddp_step.rs).

Same model as labkit's WideResNet (written here in PyTorch), same batch, optimizer,
loss and timing as the Rust rank; prints one line `result SECONDS_PER_STEP`.
Started by the runner with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set.
"""
import argparse
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

from wideresnet import wide_resnet


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--widths", default="8,16,32,64")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--timeout", type=int, default=120)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=a.timeout))
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = DistributedDataParallel(wide_resnet([int(w) for w in a.widths.split(",")]))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.rand(a.batch_size, 1, 28, 28, generator=g)
    y = torch.randint(10, (a.batch_size,), generator=g)

    def step():
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(a.steps):
        step()
    dist.barrier()
    print(f"result {(time.perf_counter() - start) / a.steps}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
