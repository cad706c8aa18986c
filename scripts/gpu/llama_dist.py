#!/usr/bin/env python3
"""One rank of a data-parallel training run of Llama-shaped models (random weights), started by
Ferry (`engine: command`) or any launcher that sets the torchrun environment.

Every rank reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT and CUDA_VISIBLE_DEVICES
from its environment (Ferry computes them; each rank sees exactly one GPU, device 0) and runs the
rows given with --rows, one after the other, in one NCCL process group:

    KIND:MODEL:MODE:MICRO_BATCH:SEQ_LEN[,...]
    KIND  ddp   torch DistributedDataParallel (default settings: 25 MiB buckets, no bucket views)
          fsdp  FSDP2 `fully_shard` on every decoder layer and on the root (full shard, reshard
                after forward), MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)
    MODEL a config in crates/plan/src/catalog/ (e.g. Llama-3.2-1B), or a path ending in .json
    MODE  full-mixed (fp32 weights; DDP: torch.autocast bf16) | full-bf16 (bf16 weights and Adam)

Procedure per row (as the planner fixture's, shared/fixtures/planner/README.md): build the model
on the GPU from its config (seed 0), wrap it, AdamW(lr=1e-5, fused=True), one batch of random
token ids per rank (CPU generator seeded 1 + rank), reset the peak counters, two steps of
forward (labels = inputs) / backward / step / zero_grad(set_to_none=True). Recorded per rank:
`torch.cuda.max_memory_allocated()` and `max_memory_reserved()` over both steps, and for the
second step the peak and the resident bytes of each phase (forward, backward, optimizer step).
Rank 0 writes one JSON object per row (every rank's figures) to OUT_DIR/dp_rows.jsonl.
"""
import argparse
import gc
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CATALOG = os.path.join(HERE, "..", "..", "crates", "plan", "src", "catalog")
sys.path.insert(0, os.path.join(HERE, "..", "..", "crates", "plan", "scripts"))


def load_config(name):
    from transformers import AutoConfig

    path = name if name.endswith(".json") else os.path.join(CATALOG, name + ".json")
    with open(path) as f:
        fields = json.load(f)
    d = tempfile.mkdtemp()
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(fields, f)
    cfg = AutoConfig.from_pretrained(d)
    cfg.use_cache = False
    return cfg


def parse_rows(text):
    rows = []
    for item in text.split(","):
        kind, model, mode, b, s = item.split(":")
        if kind not in ("ddp", "fsdp") or mode not in ("full-mixed", "full-bf16"):
            raise SystemExit(f"--rows: cannot read {item!r} (KIND ddp|fsdp, MODE full-mixed|full-bf16)")
        rows.append({"kind": kind, "model": model, "mode": mode, "micro_batch": int(b), "seq_len": int(s)})
    return rows


class Meter:
    """Peak and resident bytes per phase, and the running peak over the whole row."""

    def __init__(self, torch, cuda):
        self.torch = torch
        self.cuda = cuda
        self.peak = 0
        self.peak_reserved = 0
        self.phases = {}

    def mark(self, phase):
        t = self.torch
        if not self.cuda:  # --cpu dry run: no memory figures
            return
        t.cuda.synchronize()
        self.peak = max(self.peak, t.cuda.max_memory_allocated())
        self.peak_reserved = max(self.peak_reserved, t.cuda.max_memory_reserved())
        if phase is not None:
            self.phases[phase] = {"peak": t.cuda.max_memory_allocated(), "resident": t.cuda.memory_allocated()}
        t.cuda.reset_peak_memory_stats()


def one_row(row, rank, world, steps, probe_dir=None, device="cuda"):
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    cfg = load_config(row["model"])
    mixed = row["mode"] == "full-mixed"
    dtype = torch.float32 if mixed else torch.bfloat16
    cuda = device == "cuda"
    before = torch.cuda.memory_allocated() if cuda else 0
    with torch.device(torch.device("cuda", torch.cuda.current_device()) if cuda else device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation="sdpa")
    params_total = sum(p.numel() for p in model.parameters())
    model.train()
    autocast = False
    if row["kind"] == "ddp":
        model = DDP(model, device_ids=[torch.cuda.current_device()] if cuda else None)
        autocast = mixed
    else:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for layer in model.model.layers:
            fully_shard(layer, mp_policy=policy)
        fully_shard(model, mp_policy=policy)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    g = torch.Generator().manual_seed(1 + rank)
    x = torch.randint(0, cfg.vocab_size, (row["micro_batch"], row["seq_len"]), generator=g).to(torch.cuda.current_device() if cuda else device)
    meter = Meter(torch, cuda)
    meter.mark(None)
    meter.peak = 0
    meter.peak_reserved = 0
    resident_start = 0
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        resident_start = torch.cuda.memory_allocated()
    if probe_dir and cuda:
        torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="python")
    losses = []
    step_time = 0.0
    for step in range(steps):
        last = step == steps - 1
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        if autocast:
            with torch.autocast(device_type=device, dtype=torch.bfloat16):
                loss = model(input_ids=x, labels=x).loss
        else:
            loss = model(input_ids=x, labels=x).loss
        if last:
            meter.mark("forward")
        loss.backward()
        if last:
            meter.mark("backward")
        opt.step()
        opt.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        step_time = time.perf_counter() - t0
        meter.mark("optimizer" if last else None)
        losses.append(float(loss.detach()))
    if probe_dir and cuda:
        from measure import peak_report  # crates/plan/scripts/measure.py

        name = f"probe-{row['kind']}-{row['model']}-{row['mode']}-rank{rank}.txt"
        with open(os.path.join(probe_dir, name), "w") as f:
            f.write(f"resident at trace start {resident_start}\n")
            f.write(peak_report(torch.cuda.memory._snapshot(), meter.peak) + "\n")
        torch.cuda.memory._record_memory_history(enabled=None)
    out = {
        **row,
        "world": world,
        "params_total": params_total,
        "resident_before_build": before,
        "resident_at_start": resident_start,
        "peak_allocated_bytes": meter.peak,
        "peak_reserved_bytes": meter.peak_reserved,
        "phases": meter.phases,
        "step_time_s": step_time,
        "losses": losses,
        "status": "ok",
    }
    del model, opt, x, loss
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", required=True)
    ap.add_argument("--out", required=True, help="directory for dp_rows.jsonl (rank 0 writes)")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--probe", action="store_true",
                    help="rank 0 records the allocator history and writes what is live at the peak")
    ap.add_argument("--cpu", action="store_true", help="dry run on the CPU over gloo (no memory figures)")
    args = ap.parse_args()
    rows = parse_rows(args.rows)

    import torch
    import torch.distributed as dist

    env = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "NODE_RANK", "NNODES",
                                          "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES",
                                          "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
                                          "NVSHMEM_DISABLE_NVLS", "FERRY_JOB")}
    print("env", json.dumps(env), flush=True)
    if os.environ.get("NCCL_NVLS_ENABLE") != "0":
        raise SystemExit("NCCL_NVLS_ENABLE must be 0 on this host (NVLink multicast stays off)")
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    device = "cpu" if args.cpu else "cuda"
    if args.cpu:
        dist.init_process_group("gloo")
        uuid = f"cpu-{rank}"
    else:
        # Ferry leaves each rank exactly one GPU; plain torchrun leaves them all (use LOCAL_RANK).
        gpu = 0 if torch.cuda.device_count() == 1 else int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(gpu)
        dist.init_process_group("nccl", device_id=torch.device("cuda", gpu))
        uuid = str(torch.cuda.get_device_properties(gpu).uuid)
    gpus = [None] * world
    dist.all_gather_object(gpus, uuid)
    if rank == 0:
        print("distinct GPUs across ranks:", len(set(gpus)), gpus, flush=True)
        os.makedirs(args.out, exist_ok=True)
    for row in rows:
        try:
            probe = os.path.join(args.out, "probes") if args.probe and rank == 0 else None
            if probe:
                os.makedirs(probe, exist_ok=True)
            res = one_row(row, rank, world, args.steps, probe, device)
        except torch.OutOfMemoryError:
            res = {**row, "world": world, "status": "OOM"}
        except Exception as e:  # recorded, the next row still runs
            res = {**row, "world": world, "status": f"error: {type(e).__name__}: {e}"[:500]}
            gc.collect()
            if not args.cpu:
                torch.cuda.empty_cache()
        res["gpu_uuid"] = uuid
        every = [None] * world
        dist.all_gather_object(every, res)
        if rank == 0:
            peaks = [r.get("peak_allocated_bytes", 0) for r in every]
            line = {**row, "world": world, "ranks": every,
                    "status": every[0]["status"],
                    "peak_allocated_bytes": max(peaks),
                    "peak_reserved_bytes": max(r.get("peak_reserved_bytes", 0) for r in every)}
            with open(os.path.join(args.out, "dp_rows.jsonl"), "a") as f:
                f.write(json.dumps(line) + "\n")
            print("row", row["kind"], row["model"], row["mode"], row["micro_batch"], row["seq_len"],
                  line["status"], "peak", peaks, "losses", every[0].get("losses"), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
