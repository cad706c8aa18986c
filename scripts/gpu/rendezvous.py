#!/usr/bin/env python3
"""One rank of a multi-"node" gang started by Ferry: proves the torchrun-style rendezvous works.

Reads the environment Ferry computes (NNODES, NODE_RANK, NPROC_PER_NODE, RANK, LOCAL_RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT, CUDA_VISIBLE_DEVICES), checks it is self-consistent,
joins one NCCL process group through env://, all-reduces the ranks (sum must be
world·(world−1)/2), gathers every rank's (node, local rank, GPU UUID), then trains a small
Llama (4 layers, hidden 256, random weights) with DDP for --steps steps on one fixed batch per
rank and checks the loss fell and that the replicas' weights are identical afterwards.
Rank 0 writes OUT_DIR/rendezvous.json.
"""
import argparse
import json
import os
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from transformers import LlamaConfig, LlamaForCausalLM

    e = lambda k: int(os.environ[k])  # noqa: E731
    nnodes, node, nproc, rank, local, world = (
        e("NNODES"), e("NODE_RANK"), e("NPROC_PER_NODE"), e("RANK"), e("LOCAL_RANK"), e("WORLD_SIZE"))
    problems = []
    if world != nnodes * nproc:
        problems.append(f"WORLD_SIZE {world} != NNODES {nnodes} x NPROC_PER_NODE {nproc}")
    if rank != node * nproc + local:
        problems.append(f"RANK {rank} != NODE_RANK {node} x {nproc} + LOCAL_RANK {local}")
    if os.environ.get("NCCL_NVLS_ENABLE") != "0":
        problems.append("NCCL_NVLS_ENABLE is not 0")
    if torch.cuda.device_count() != 1:
        problems.append(f"{torch.cuda.device_count()} GPUs visible, expected 1")
    if problems:
        raise SystemExit("; ".join(problems))
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", device_id=torch.device("cuda", 0))
    t = torch.tensor([float(rank)], device="cuda")
    dist.all_reduce(t)
    me = {"rank": rank, "node_rank": node, "local_rank": local,
          "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
          "gpu_uuid": str(torch.cuda.get_device_properties(0).uuid)}
    every = [None] * world
    dist.all_gather_object(every, me)

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=704, num_hidden_layers=4,
                      num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=256,
                      use_cache=False)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg)
    model = DDP(model, device_ids=[0])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randint(0, cfg.vocab_size, (4, 128), generator=g).cuda()
    losses = []
    for _ in range(args.steps):
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
    # Replicas must agree: compare a checksum of every weight across ranks.
    checksum = torch.stack([p.detach().double().sum() for p in model.parameters()]).sum().reshape(1)
    sums = [torch.zeros_like(checksum) for _ in range(world)]
    dist.all_gather(sums, checksum)
    result = {
        "world": world, "nnodes": nnodes, "nproc_per_node": nproc,
        "all_reduce_sum": float(t.item()), "expected_sum": world * (world - 1) / 2,
        "ranks": every, "loss_first": losses[0], "loss_last": losses[-1],
        "replica_checksums": [float(s.item()) for s in sums],
        "master": f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}",
    }
    ok = (result["all_reduce_sum"] == result["expected_sum"]
          and len({r["gpu_uuid"] for r in every}) == world
          and sorted(r["rank"] for r in every) == list(range(world))
          and losses[-1] < losses[0]
          and max(result["replica_checksums"]) == min(result["replica_checksums"]))
    result["ok"] = ok
    if rank == 0:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "rendezvous.json"), "w") as f:
            json.dump(result, f, indent=1)
        print("rendezvous", json.dumps(result), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
