#!/usr/bin/env python3
"""Reads what run_all.sh saved of the Ferry stage (jobs.json, events-*.json, dp_rows.jsonl,
rendezvous.json) and prints the facts issue 9 asks for, as checks that can fail:

  * llama-dp ran on distinct GPUs (one per rank) with the environment Ferry computed and succeeded;
  * gang-2x2 was applied while llama-dp held the GPUs, recorded why it waited, and started
    only after llama-dp ended (event timestamps);
  * gang-2x2 ran as NNODES=2 x (GPUs/2) ranks whose rendezvous, all-reduce and DDP training worked.

    python3 scripts/gpu/queue_report.py RESULTS_DIR
"""
import json
import os
import sys
from datetime import datetime


def at(e):
    return datetime.fromisoformat(e["at"].replace("Z", "+00:00"))


def main():
    r = sys.argv[1]
    jobs = json.load(open(os.path.join(r, "jobs.json")))
    items = jobs if isinstance(jobs, list) else jobs.get("items", jobs.get("jobs", []))
    by = {j["metadata"]["name"]: j for j in items}
    ev = {n: json.load(open(os.path.join(r, f"events-{n}.json"))) for n in ("llama-dp", "gang-2x2")}
    checks = []

    def check(name, ok, detail):
        checks.append(ok)
        print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}")

    a, b = by.get("llama-dp", {}), by.get("gang-2x2", {})
    sa, sb = a.get("status") or {}, b.get("status") or {}
    check("llama-dp succeeded", sa.get("phase") == "Succeeded", f"phase {sa.get('phase')}, gpus {sa.get('gpus')}")
    gpus_a = [g for rank in sa.get("gpus", []) for g in rank]
    world_a = len(sa.get("gpus", []))
    check("llama-dp: one distinct GPU per rank", world_a >= 2 and len(gpus_a) == world_a and len(set(gpus_a)) == world_a, gpus_a)
    check("gang-2x2 succeeded", sb.get("phase") == "Succeeded", f"phase {sb.get('phase')}, gpus {sb.get('gpus')}")

    def first(events, reason):
        return next((e for e in events if e["reason"] == reason), None)

    a_end = first(ev["llama-dp"], "Completed") or next(
        (e for e in ev["llama-dp"] if e["to"] in ("Succeeded", "Failed", "Cancelled")), None)
    a_start = first(ev["llama-dp"], "Started")
    b_wait = first(ev["gang-2x2"], "Waiting")
    b_start = first(ev["gang-2x2"], "Started")
    b_created = ev["gang-2x2"][0] if ev["gang-2x2"] else None
    check("gang-2x2 recorded why it waited", b_wait is not None, (b_wait or {}).get("message"))
    if a_start and a_end and b_start and b_created:
        check("gang-2x2 was applied while llama-dp ran", at(b_created) < at(a_end),
              f"applied {b_created['at']}, llama-dp {a_start['at']} .. {a_end['at']}")
        gap = (at(b_start) - at(a_end)).total_seconds()
        check("gang-2x2 started only after llama-dp ended", gap >= 0,
              f"gang-2x2 started {b_start['at']}, {gap:.2f} s after llama-dp ended; "
              f"waited {(at(b_start) - at(b_created)).total_seconds():.1f} s")
    else:
        check("event timestamps present", False, "missing Started/Completed events")
    try:
        rv = json.load(open(os.path.join(r, "rendezvous.json")))
        nodes = sorted({(x["node_rank"], x["local_rank"]) for x in rv["ranks"]})
        want = [(n, l) for n in range(2) for l in range(rv["nproc_per_node"])]
        check(f"2 nodes x {rv['nproc_per_node']} ranks rendezvous", rv["ok"] and rv["nnodes"] == 2 and nodes == want,
              f"all_reduce {rv['all_reduce_sum']} (want {rv['expected_sum']}), (node, local) {nodes}, "
              f"loss {rv['loss_first']:.3f} -> {rv['loss_last']:.3f}, master {rv['master']}")
    except (OSError, KeyError, ValueError) as e:
        check("2-node rendezvous", False, f"no rendezvous.json: {e}")
    try:
        rows = [json.loads(l) for l in open(os.path.join(r, "dp_rows.jsonl"))]
        for row in rows:
            peaks = [x.get("peak_allocated_bytes", 0) / 2**30 for x in row["ranks"]]
            print(f"  row {row['kind']:4} {row['model']:16} {row['mode']:10} b={row['micro_batch']} s={row['seq_len']} "
                  f"{row['status']:3} peak GiB per rank {[round(p, 2) for p in peaks]}")
        check("every DDP/FSDP row ok", rows and all(x["status"] == "ok" for x in rows), f"{len(rows)} rows")
    except OSError as e:
        check("DDP/FSDP rows", False, str(e))
    print(f"queue/launch checks: {sum(checks)} passed, {len(checks) - sum(checks)} failed")
    return 0 if all(checks) else 1


if __name__ == "__main__":
    sys.exit(main())
