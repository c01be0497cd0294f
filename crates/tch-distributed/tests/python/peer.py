"""A PyTorch rank for tests/python_peers.rs: the same collectives (and sends and
receives), in the same order,
as the Rust scenario `mixed` there, each result printed in the same format.

Environment: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT as for env://, and
PEER_INIT=tcp to join through tcp://MASTER_ADDR:MASTER_PORT instead. PEER_SCENARIO=mesh
runs the scenario `mesh` instead: device meshes and the groups they make.
"""
import os
from datetime import timedelta

import torch
import torch.distributed as dist


def show(name, tensor):
    values = tensor.flatten().tolist()
    if tensor.is_floating_point():
        text = " ".join(f"{v:.4f}" for v in values)
    else:
        text = " ".join(str(v) for v in values)
    print(f"result {name}: {text}", flush=True)


def main():
    rank = int(os.environ["RANK"])
    n = int(os.environ["WORLD_SIZE"])
    timeout = timedelta(seconds=60)
    if os.environ.get("PEER_INIT") == "tcp":
        url = f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
        dist.init_process_group("gloo", init_method=url, rank=rank, world_size=n, timeout=timeout)
    else:
        dist.init_process_group("gloo", init_method="env://", timeout=timeout)
    print(f"python rank {rank} of {n}, torch {torch.__version__}", flush=True)
    if os.environ.get("PEER_SCENARIO") == "mesh":
        mesh(rank, n)
    else:
        collectives(rank, n)
    dist.destroy_process_group()
    print("python peer finished", flush=True)


def mesh(rank, n):
    """A (dp, tp) = (n / 2, 2) mesh, a 1-D mesh of the world, then a group made after
    both: the groups' numbers and keys agree only if both languages made the same groups
    in the same order."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh_2d = init_device_mesh("cpu", (n // 2, 2), mesh_dim_names=("dp", "tp"))
    show("mesh coordinate", torch.tensor(mesh_2d.get_coordinate(), dtype=torch.int64))
    for name in ("tp", "dp"):
        t = torch.tensor([rank], dtype=torch.int64)
        dist.all_reduce(t, dist.ReduceOp.SUM, group=mesh_2d.get_group(name))
        show(f"mesh {name} sum, local rank {mesh_2d.get_local_rank(name)}", t)
    tp = mesh_2d["tp"]
    show("mesh tp slice", tp.mesh)
    world = init_device_mesh("cpu", (n,), mesh_dim_names=("world",))
    t = torch.tensor([rank], dtype=torch.int64)
    dist.all_reduce(t, dist.ReduceOp.MAX, group=world.get_group("world"))
    show("mesh world max", t)
    ends = dist.new_group([0, n - 1])
    if rank in (0, n - 1):
        t = torch.tensor([rank], dtype=torch.int64)
        dist.all_reduce(t, dist.ReduceOp.SUM, group=ends)
        show("new_group after the meshes", t)


def collectives(rank, n):

    t = torch.tensor([rank + 1.0, 0.5 * (rank + 1)], dtype=torch.float32)
    dist.all_reduce(t, dist.ReduceOp.SUM)
    show("all_reduce sum f32", t)
    t = torch.tensor([rank + 2.0], dtype=torch.float64)
    dist.all_reduce(t, dist.ReduceOp.PRODUCT)
    show("all_reduce product f64", t)
    t = torch.tensor([10 - rank, rank], dtype=torch.int64)
    dist.all_reduce(t, dist.ReduceOp.MIN)
    show("all_reduce min i64", t)
    t = torch.tensor([rank, -rank], dtype=torch.int32)
    dist.all_reduce(t, dist.ReduceOp.MAX)
    show("all_reduce max i32", t)

    t = torch.tensor([rank * 100 + 7, rank], dtype=torch.int64)
    dist.broadcast(t, src=1)
    show("broadcast from 1", t)
    t = torch.tensor([rank + 1.0], dtype=torch.float32)
    dist.reduce(t, dst=n - 1, op=dist.ReduceOp.SUM)
    if rank == n - 1:
        show("reduce sum to last", t)
    outputs = [torch.zeros(2, dtype=torch.int64) for _ in range(n)]
    dist.all_gather(outputs, torch.tensor([rank * 10, rank], dtype=torch.int64))
    show("all_gather", torch.cat(outputs))
    dist.barrier()
    print("result barrier: passed", flush=True)

    big = torch.full((200_000,), rank + 1.0, dtype=torch.float32)
    dist.all_reduce(big, dist.ReduceOp.SUM)
    show("all_reduce sum of 200000", torch.tensor([big.sum().item(), big[0].item(), big[-1].item()]))

    work = dist.all_reduce(torch.tensor([1.0]), async_op=True)
    work.wait()
    print("result all_reduce async: done", flush=True)

    states = [
        torch.full((3,), float(rank)),
        torch.tensor([rank, rank + 1], dtype=torch.int64),
        torch.arange(4, dtype=torch.float32) + rank,
    ]
    dist._broadcast_coalesced(dist.group.WORLD, states, 250 * 1024 * 1024, 0)
    show("broadcast_coalesced", torch.cat([s.double() for s in states]))

    ends = dist.new_group([0, n - 1])
    if rank in (0, n - 1):
        t = torch.tensor([rank], dtype=torch.int64)
        dist.all_reduce(t, dist.ReduceOp.SUM, group=ends)
        show(f"new_group first and last: group rank {dist.get_rank(ends)} of {dist.get_world_size(ends)}", t)
    everyone = dist.new_group()
    t = torch.tensor([rank], dtype=torch.int64)
    dist.all_reduce(t, dist.ReduceOp.MAX, group=everyone)
    show("new_group all", t)

    shard = torch.tensor([rank * 10, rank], dtype=torch.int64)
    full = torch.zeros(2 * n, dtype=torch.int64)
    dist.all_gather_into_tensor(full, shard)
    show("all_gather_into_tensor", full)
    grads = torch.arange(2 * n, dtype=torch.float32) + rank
    grad_shard = torch.zeros(2, dtype=torch.float32)
    dist.reduce_scatter_tensor(grad_shard, grads, dist.ReduceOp.SUM)
    show("reduce_scatter_tensor", grad_shard)
    # A ring: each rank sends to the next and receives from the previous one.
    sent = dist.isend(torch.tensor([rank * 7.0 + 1.0]), (rank + 1) % n, tag=3)
    got = torch.zeros(1)
    dist.irecv(got, (rank + n - 1) % n, tag=3).wait()
    sent.wait()
    show("ring", got)


if __name__ == "__main__":
    main()
