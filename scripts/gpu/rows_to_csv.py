#!/usr/bin/env python3
"""Turns dp_rows.jsonl (llama_dist.py) and megatron_rows.jsonl (megatron_step.py) into the
planner's calibration CSV (crates/plan/scripts/measured/*.csv, read by tests/calibration.rs):
one row per configuration, peak = the largest per-GPU `max_memory_allocated()` over ranks.

    python3 scripts/gpu/rows_to_csv.py RESULTS_DIR > crates/plan/scripts/measured/multi-gpu-h200.csv
"""
import json
import os
import sys

HEADER = ("model,mode,micro_batch,seq_len,grad_ckpt,lora_rank,engine,tp,pp,dp,zero,micro_batches,"
          "params_total,peak_allocated_bytes,peak_reserved_bytes,step_time_s,status")


def main():
    r = sys.argv[1]
    print(HEADER)
    for line in open(os.path.join(r, "dp_rows.jsonl")):
        d = json.loads(line)
        ranks = d["ranks"]
        print(",".join(str(x) for x in (
            d["model"], d["mode"], d["micro_batch"], d["seq_len"], "false", 16, "torchrun", 1, 1,
            d["world"], 3 if d["kind"] == "fsdp" else 0, 1, ranks[0].get("params_total", ""),
            d["peak_allocated_bytes"] if d["status"] == "ok" else "",
            d["peak_reserved_bytes"] if d["status"] == "ok" else "",
            "%.4f" % max(x.get("step_time_s", 0) for x in ranks), d["status"])))
    for line in open(os.path.join(r, "megatron_rows.jsonl")):
        d = json.loads(line)
        ranks = d["ranks"]
        print(",".join(str(x) for x in (
            d["model"], d["mode"], d["micro_batch"], d["seq_len"], "false", 16, "megatron", d["tp"],
            d["pp"], d["dp"], d["zero"], d["micro_batches"],
            sum(x["params_here"] for x in ranks if x["dp_rank"] == 0 and x["tp_rank"] == 0) * d["tp"],
            d["peak_allocated_bytes"] if d["status"] == "ok" else "",
            d["peak_reserved_bytes"] if d["status"] == "ok" else "",
            "%.4f" % max(x["step_time_s"] for x in ranks), d["status"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
