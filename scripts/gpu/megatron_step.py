#!/usr/bin/env python3
"""Peak GPU memory of Megatron-Core GPT training steps, for the planner's validation data.

Run one process per GPU (torchrun, or Ferry `engine: command`); every rank:
  * builds one pipeline stage of a Llama-style GPTModel from a planner catalogue config
    (crates/plan/src/catalog/MODEL.json) in bf16 with the local layer spec (mcore_common),
    sequence parallelism when TP > 1, vocabulary padded as Megatron pads it;
  * wraps it in Megatron-Core's DistributedDataParallel (fp32 gradient buffer,
    distributed optimizer) and builds get_megatron_optimizer(adam, bf16, distributed optimizer);
  * runs two iterations of get_forward_backward_func() (1F1B when PP > 1) over
    --micro-batches micro-batches of --micro-batch × --seq random tokens, then optimizer.step();
  * records torch.cuda.max_memory_allocated()/max_memory_reserved() over both iterations (the
    counters are reset once the model, DDP buffers and optimizer exist), and the second
    iteration's peak per phase (forward-backward, optimizer step).
Rank 0 appends one JSON object (every rank's figures) to OUT_DIR/megatron_rows.jsonl.

    torchrun --nproc-per-node 4 scripts/gpu/megatron_step.py --model Meta-Llama-3-8B \
        --tp 2 --pp 2 --micro-batch 1 --seq 2048 --micro-batches 4 --out /tmp/out
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))
CATALOG = os.path.join(HERE, "..", "..", "crates", "plan", "src", "catalog")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a catalogue name (crates/plan/src/catalog) or a .json path")
    ap.add_argument("--tp", type=int, required=True)
    ap.add_argument("--pp", type=int, required=True)
    ap.add_argument("--micro-batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--micro-batches", type=int, default=1)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--out", required=True)
    ap.add_argument("--probe", action="store_true",
                    help="every rank records the allocator history and writes what is live at its peak")
    args = ap.parse_args()

    import torch
    import torch.distributed as dist

    import mcore_common as mc

    rank, world = mc.init_distributed()
    from megatron.core import parallel_state as ps
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.distributed.finalize_model_grads import finalize_model_grads
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    ps.initialize_model_parallel(tensor_model_parallel_size=args.tp,
                                 pipeline_model_parallel_size=args.pp)
    model_parallel_cuda_manual_seed(1234)
    adam = mc.use_fused_adam()
    path = args.model if args.model.endswith(".json") else os.path.join(CATALOG, args.model + ".json")
    with open(path) as f:
        shape = mc.hf_shape(json.load(f))
    dp = world // (args.tp * args.pp)
    before = torch.cuda.memory_allocated()
    config, model = mc.build_gpt(shape, args.tp, args.pp, torch.bfloat16, args.seq,
                                 sequence_parallel=args.tp > 1)
    params_here = sum(p.numel() for p in model.parameters())
    ddp_config = DistributedDataParallelConfig(grad_reduce_in_fp32=True, overlap_grad_reduce=False,
                                               use_distributed_optimizer=True)
    model = DistributedDataParallel(config=config, ddp_config=ddp_config, module=model)
    opt = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=1e-5, bf16=True, params_dtype=torch.bfloat16,
                        use_distributed_optimizer=True, clip_grad=1.0),
        [model])
    config.finalize_model_grads_func = finalize_model_grads
    config.grad_scale_func = opt.scale_loss
    forward_backward = get_forward_backward_func()

    dp_rank = ps.get_data_parallel_rank()
    g = torch.Generator().manual_seed(7 + dp_rank)  # same data on every TP/PP rank of a replica
    batches = [torch.randint(0, shape["vocab_size"], (args.micro_batch, args.seq + 1), generator=g).cuda()
               for _ in range(args.micro_batches)]
    position_ids = torch.arange(args.seq, device="cuda").unsqueeze(0).expand(args.micro_batch, -1)

    def forward_step(data_iterator, model):
        tokens = next(data_iterator)
        out = model(tokens[:, :-1], position_ids, None, labels=tokens[:, 1:])

        def loss_func(output_tensor):
            loss = output_tensor.float().mean()
            return loss, {"lm loss": loss.detach()}

        return out, loss_func

    peak = peak_reserved = 0
    phases = {}

    def mark(phase):
        nonlocal peak, peak_reserved
        torch.cuda.synchronize()
        peak = max(peak, torch.cuda.max_memory_allocated())
        peak_reserved = max(peak_reserved, torch.cuda.max_memory_reserved())
        if phase:
            phases[phase] = {"peak": torch.cuda.max_memory_allocated(),
                             "resident": torch.cuda.memory_allocated()}
        torch.cuda.reset_peak_memory_stats()

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    resident_start = torch.cuda.memory_allocated()
    if args.probe:
        torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="python")
    losses, step_time, status = [], 0.0, "ok"
    try:
        for step in range(args.steps):
            last = step == args.steps - 1
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            model.zero_grad_buffer()
            opt.zero_grad()
            out = forward_backward(forward_step_func=forward_step, data_iterator=iter(batches),
                                   model=[model], num_microbatches=args.micro_batches,
                                   seq_length=args.seq, micro_batch_size=args.micro_batch,
                                   decoder_seq_length=args.seq, forward_only=False)
            mark("forward_backward" if last else None)
            ok, grad_norm, _ = opt.step()
            mark("optimizer" if last else None)
            step_time = time.perf_counter() - t0
            if out:
                losses.append(float(sum(o["lm loss"] for o in out) / len(out)))
    except torch.OutOfMemoryError:
        status = "OOM"
    if args.probe:
        sys.path.insert(0, os.path.join(HERE, "..", "..", "crates", "plan", "scripts"))
        from measure import peak_report

        probes = os.path.join(args.out, "probes")
        os.makedirs(probes, exist_ok=True)
        name = f"probe-megatron-{os.path.basename(args.model)}-tp{args.tp}-pp{args.pp}-rank{rank}.txt"
        with open(os.path.join(probes, name), "w") as f:
            f.write(f"resident at trace start {resident_start}\n")
            f.write(peak_report(torch.cuda.memory._snapshot(), peak) + "\n")
        torch.cuda.memory._record_memory_history(enabled=None)
    me = {"rank": rank, "tp_rank": ps.get_tensor_model_parallel_rank(),
          "pp_rank": ps.get_pipeline_model_parallel_rank(), "dp_rank": dp_rank,
          "params_here": params_here, "resident_before_build": before,
          "resident_at_start": resident_start, "peak_allocated_bytes": peak,
          "peak_reserved_bytes": peak_reserved, "phases": phases, "step_time_s": step_time,
          "losses": losses, "status": status}
    every = [None] * world
    dist.all_gather_object(every, me)
    if rank == 0:
        os.makedirs(args.out, exist_ok=True)
        line = {"engine": "megatron", "model": args.model, "mode": "full-mixed", "tp": args.tp,
                "pp": args.pp, "dp": dp, "zero": 1, "micro_batch": args.micro_batch,
                "seq_len": args.seq, "micro_batches": args.micro_batches, "world": world,
                "optimizer": adam, "megatron_core": getattr(__import__("megatron.core").core, "__version__", "?"),
                "status": "ok" if all(r["status"] == "ok" for r in every) else "OOM",
                "peak_allocated_bytes": max(r["peak_allocated_bytes"] for r in every),
                "peak_reserved_bytes": max(r["peak_reserved_bytes"] for r in every),
                "ranks": every}
        with open(os.path.join(args.out, "megatron_rows.jsonl"), "a") as f:
            f.write(json.dumps(line) + "\n")
        print("megatron", args.model, f"tp={args.tp} pp={args.pp} dp={dp}", line["status"],
              "peaks", [r["peak_allocated_bytes"] for r in every], "losses", losses, flush=True)
    dist.barrier()
    ps.destroy_model_parallel()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
