"""A PyTorch rank that trains the lab's WideResNet under DistributedDataParallel in
the same group as Rust ranks (bench/tests/mixed_ddp.rs runs both): same model, same
batches, same SGD steps, every result printed in the Rust rank's format.

Environment: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (env://). Options: --steps,
--batch-size, --widths, --lr, --device (cpu: Gloo; cuda: NCCL, cuda:<LOCAL_RANK>, with
LOCAL_RANK defaulting to RANK for ranks started by hand on one node). The model runs in eval mode (no dropout, BatchNorm on its
running statistics), so N ranks with batch B must end where one process with the
whole N*B batch ends: this rank checks that too ("reference max diff").
"""
import argparse
import copy
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

from wideresnet import parse_widths, wide_resnet


def batch(rank, size, device):
    """Rank `rank`'s batch: the same numbers the Rust rank computes (on the CPU, then moved)."""
    pixels = size * 28 * 28
    x = (torch.arange(pixels, dtype=torch.float32) * 0.001 + rank).sin().reshape(size, 1, 28, 28)
    y = (torch.arange(size, dtype=torch.int64) + rank) % 10
    return x.to(device), y.to(device)


def refuse(message):
    """Bad input: the reason on stderr, exit code 2 (as the Rust rank)."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def placement(device):
    """The CPU, or cuda:<LOCAL_RANK> (else RANK); refuses what cannot work."""
    if device == "cpu":
        return torch.device("cpu")
    local_rank = int(os.environ.get("LOCAL_RANK", os.environ.get("RANK", "0")))
    gpus = torch.cuda.device_count()
    if gpus == 0:
        refuse("--device cuda: torch sees no GPU on this machine; run with --device cpu (Gloo)")
    if local_rank >= gpus:
        refuse(
            f"--device cuda: local rank {local_rank}, but this node has {gpus} GPU(s) and NCCL needs "
            f"one per rank: start at most {gpus} rank(s) here (set LOCAL_RANK on each), or use --device cpu"
        )
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


def bits(tensor):
    """The sum of the float32 bit patterns: any changed bit changes it."""
    return tensor.detach().contiguous().view(torch.int32).to(torch.int64).sum().item()


def show_state(what, params):
    print(f"{what}: " + " ".join(str(bits(p)) for p in params), flush=True)


def without_step_counters(model):
    # tch's BatchNorm keeps no num_batches_tracked; momentum is fixed, so dropping it
    # changes nothing but the list of buffers DDP broadcasts.
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.num_batches_tracked = None
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--widths", default="narrow")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(1)
    device = placement(args.device)
    if device.type == "cuda":
        dist.init_process_group("nccl", init_method="env://", device_id=device)
    else:
        dist.init_process_group("gloo", init_method="env://")
    rank, n = dist.get_rank(), dist.get_world_size()
    print(f"python rank {rank} of {n} on {device}", flush=True)
    torch.manual_seed(1000 + rank)
    model = without_step_counters(wide_resnet(parse_widths(args.widths))).to(device).eval()
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    start = copy.deepcopy(model.state_dict())
    start_params = [p.detach().clone() for p in model.parameters()]
    show_state("start", model.parameters())
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    x, y = batch(rank, args.batch_size, device)
    for step in range(args.steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
    show_state("end", model.parameters())

    # One process, the whole batch, from the same start.
    alone = without_step_counters(wide_resnet(parse_widths(args.widths))).to(device).eval()
    alone.load_state_dict(start)
    opt = torch.optim.SGD(alone.parameters(), lr=args.lr)
    xs, ys = zip(*(batch(r, args.batch_size, device) for r in range(n)))
    x_all, y_all = torch.cat(xs), torch.cat(ys)
    for step in range(args.steps):
        opt.zero_grad()
        nn.functional.cross_entropy(alone(x_all), y_all).backward()
        opt.step()
    diff = max((a - b).abs().max().item() for a, b in zip(model.parameters(), alone.parameters()))
    moved = max((a - b).abs().max().item() for a, b in zip(model.parameters(), start_params))
    print(f"reference max diff: {diff:.3e} (the weights moved by up to {moved:.3e})", flush=True)
    dist.destroy_process_group()
    print("python peer finished", flush=True)


if __name__ == "__main__":
    main()
