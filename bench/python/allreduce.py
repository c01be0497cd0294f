"""PyTorch rank of the all_reduce benchmark (bench/src/bin/allreduce.rs is the runner).

One process per rank, started by the runner with RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT set (env://). It joins a Gloo group, prints ``ready ...`` and then obeys
one command per line on stdin, answering on stdout:

    run NUMEL WARMUP ITERS  ->  done SECONDS_PER_OP
    quit                    ->  (leaves the group and exits 0)

``run`` allocates a float32 tensor of NUMEL elements, checks one all_reduce(SUM)
against the expected result, runs WARMUP untimed all_reduces, a barrier, then times
ITERS all_reduces on this rank. The Rust rank (the runner's ``--rank-process`` mode)
does exactly the same, step for step, so the runner can compute one statistic for both.
End of input (the runner died) makes the rank exit.
"""

import argparse
import datetime
import os
import sys
import time


def answer(line: str) -> bool:
    """Writes one line to the runner; False when it is gone (its end of the pipe closed)."""
    try:
        print(line, flush=True)
        return True
    except BrokenPipeError:
        # Nothing can be written any more: keep the exit-time flush from complaining.
        sys.stdout = open(os.devnull, "w")
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, required=True, help="torch intra-op threads")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds for rendezvous and collectives")
    args = parser.parse_args()

    import torch
    import torch.distributed as dist

    torch.set_num_threads(args.threads)
    dist.init_process_group(
        backend="gloo",
        init_method="env://",
        timeout=datetime.timedelta(seconds=args.timeout),
    )
    rank = dist.get_rank()
    world = dist.get_world_size()
    if not answer(f"ready torch={torch.__version__} threads={torch.get_num_threads()}"):
        return 0  # the runner is gone

    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "quit":
            break
        if words[0] != "run" or len(words) != 4:
            print(f"rank {rank}: bad command {line!r}", file=sys.stderr, flush=True)
            return 2
        numel, warmup, iters = (int(w) for w in words[1:])

        tensor = torch.full((numel,), float(rank + 1), dtype=torch.float32)
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        expected = world * (world + 1) / 2
        first, last = tensor[0].item(), tensor[-1].item()
        if first != expected or last != expected:
            print(f"rank {rank}: all_reduce gave {first}, {last}, expected {expected}", file=sys.stderr, flush=True)
            return 1
        tensor.zero_()
        for _ in range(warmup):
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        elapsed = time.perf_counter() - start
        del tensor
        if not answer(f"done {elapsed / iters:.9e}"):
            return 0
    else:
        return 0  # end of input: the runner is gone; leave without ceremony

    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
