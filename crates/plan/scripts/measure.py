#!/usr/bin/env python3
"""Ground truth for the Ferry planner, measured on a real GPU.

Runs the procedure of `shared/fixtures/planner/README.md` (one forked child per row, fresh
CUDA context, two training steps, `torch.cuda.max_memory_allocated()`), for rows given on the
command line or the default extra grid below, and counts parameters of every config in
`crates/plan/src/catalog/` with `transformers` on the meta device.

Usage (on a machine with torch + transformers + peft):
    python3 crates/plan/scripts/measure.py counts            # parameter counts, JSON lines
    python3 crates/plan/scripts/measure.py rows              # extra calibration rows, CSV
    python3 crates/plan/scripts/measure.py probe MODEL MODE B S CKPT   # what is live at the peak

Outputs go to stdout and, when $OUT is set, to $OUT/*.csv|jsonl|txt.
"""
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time

os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")

HERE = os.path.dirname(os.path.abspath(__file__))
CATALOG = os.path.join(HERE, "..", "src", "catalog")
OUT = os.environ.get("OUT")

# Extra rows: models, shapes, modes and a LoRA rank the fixture does not hold.
EXTRA = [
    # model, mode, micro_batch, seq_len, grad_ckpt, lora_rank
    ("Qwen2.5-1.5B", "full-mixed", 2, 1024, False, 16),
    ("Qwen2.5-1.5B", "lora", 2, 4096, True, 16),
    ("Qwen3-0.6B", "full-bf16", 2, 2048, False, 16),
    ("Qwen3-0.6B", "lora", 4, 1024, False, 16),
    ("Llama-3.2-1B", "lora", 2, 4096, True, 64),
    ("Llama-3.2-3B", "full-bf16", 1, 1024, False, 16),
    ("Qwen2.5-3B", "full-bf16", 2, 4096, True, 16),
    ("Qwen2.5-0.5B", "full-mixed", 8, 2048, False, 16),
    ("Qwen2.5-7B", "full-mixed", 1, 1024, True, 16),
]


def load_config(name):
    from transformers import AutoConfig

    with open(os.path.join(CATALOG, name + ".json")) as f:
        fields = json.load(f)
    d = tempfile.mkdtemp()
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(fields, f)
    return AutoConfig.from_pretrained(d)


def counts():
    import torch
    from transformers import AutoModelForCausalLM

    lines = []
    for fname in sorted(os.listdir(CATALOG)):
        name = fname[:-5]
        cfg = load_config(name)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(cfg)
        n = model.num_parameters()
        lines.append(json.dumps({"model": name, "num_parameters": n}))
        print(lines[-1], flush=True)
    if OUT:
        with open(os.path.join(OUT, "counts.jsonl"), "w") as f:
            f.write("\n".join(lines) + "\n")


def build(name, mode, rank):
    import torch
    from transformers import AutoModelForCausalLM

    cfg = load_config(name)
    cfg.use_cache = False
    dtype = torch.float32 if mode == "full-mixed" else torch.bfloat16
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation="sdpa")
    if mode == "lora":
        from peft import LoraConfig, get_peft_model

        for p in model.parameters():
            p.requires_grad_(False)
        model = get_peft_model(
            model,
            LoraConfig(
                r=rank,
                lora_alpha=2 * rank,
                target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
                lora_dropout=0.0,
                bias="none",
                task_type="CAUSAL_LM",
            ),
        )
    return cfg, model


def one_row(args, queue, probe=False):
    name, mode, b, s, ckpt, rank = args
    import torch

    try:
        torch.manual_seed(0)
        torch.cuda.set_device(0)
        cfg, model = build(name, mode, rank)
        model.train()
        if ckpt:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=1e-5, fused=True)
        g = torch.Generator().manual_seed(1)
        x = torch.randint(0, cfg.vocab_size, (b, s), generator=g).cuda()
        total = sum(p.numel() for p in model.parameters())
        trainable = sum(p.numel() for p in params)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        if probe:
            torch.cuda.memory._record_memory_history(max_entries=2_000_000, stacks="python")
        step_time = 0.0
        for _ in range(2):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            if mode == "full-mixed":
                with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
                    loss = model(input_ids=x, labels=x).loss
            else:
                loss = model(input_ids=x, labels=x).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            step_time = time.perf_counter() - t0
        peak = torch.cuda.max_memory_allocated()
        reserved = torch.cuda.max_memory_reserved()
        report = None
        if probe:
            report = peak_report(torch.cuda.memory._snapshot(), peak)
        queue.put(("ok", total, trainable, peak, reserved, step_time, report))
    except torch.OutOfMemoryError:
        queue.put(("OOM", 0, 0, 0, 0, 0.0, None))


def peak_report(snap, peak):
    """Replays the allocator trace and lists what was live at the peak, grouped by call site."""
    events = [e for trace in snap["device_traces"] for e in trace]
    live = {}
    cur = 0
    best = -1
    best_live = {}
    for e in events:
        a = e["action"]
        if a == "alloc":
            live[e["addr"]] = e
            cur += e["size"]
            if cur > best:
                best = cur
                best_live = dict(live)
        elif a == "free_completed":
            if e["addr"] in live:
                cur -= live.pop(e["addr"])["size"]
    groups = {}
    for e in best_live.values():
        frames = [f for f in e.get("frames", []) if f["filename"].endswith(".py")]
        key = " <- ".join(
            "%s:%d:%s" % (os.path.basename(f["filename"]), f["line"], f["name"]) for f in frames[:4]
        ) or "<no python frame>"
        g = groups.setdefault(key, [0, 0])
        g[0] += e["size"]
        g[1] += 1
    lines = ["trace peak (relative to trace start) %d, max_memory_allocated %d" % (best, peak)]
    for key, (size, n) in sorted(groups.items(), key=lambda kv: -kv[1][0])[:40]:
        lines.append("%14d %6d  %s" % (size, n, key))
    return "\n".join(lines)


def run_rows(rows, probe=False):
    ctx = mp.get_context("fork")
    header = "model,mode,micro_batch,seq_len,grad_ckpt,lora_rank,params_total,params_trainable,peak_allocated_bytes,peak_reserved_bytes,step_time_s,status"
    out = [header]
    print(header, flush=True)
    sink = open(os.path.join(OUT, "extra_rows.csv"), "w") if OUT and not probe else None
    if sink:
        sink.write(header + "\n")
        sink.flush()
    for row in rows:
        q = ctx.Queue()
        p = ctx.Process(target=one_row, args=(row, q, probe))
        p.start()
        res = q.get()
        p.join()
        status, total, trainable, peak, reserved, st, report = res
        name, mode, b, s, ckpt, rank = row
        line = "%s,%s,%d,%d,%s,%d,%d,%d,%s,%s,%s,%s" % (
            name, mode, b, s, str(ckpt).lower(), rank, total, trainable,
            peak if status == "ok" else "", reserved if status == "ok" else "",
            "%.4f" % st if status == "ok" else "", status,
        )
        out.append(line)
        print(line, flush=True)
        if sink:  # written row by row so a time-out keeps what was measured
            sink.write(line + "\n")
            sink.flush()
        if report:
            print(report, flush=True)
            if OUT:
                with open(os.path.join(OUT, "probe-%s-%s-%d-%d.txt" % (name, mode, b, s)), "w") as f:
                    f.write(report + "\n")
    if sink:
        sink.close()


def main():
    import torch  # noqa: F401  (imported before forking, CUDA not initialised)

    assert not torch.cuda.is_initialized()
    cmd = sys.argv[1] if len(sys.argv) > 1 else "rows"
    if cmd == "counts":
        counts()
    elif cmd == "rows":
        run_rows(EXTRA)
    elif cmd == "probe":
        name, mode, b, s, ckpt = sys.argv[2:7]
        run_rows([(name, mode, int(b), int(s), ckpt == "true", 16)], probe=True)
    else:
        sys.exit("unknown command %r: use counts, rows or probe" % cmd)


if __name__ == "__main__":
    main()
