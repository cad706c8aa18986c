"""Checks the events and logs `trl_preempt.sh` saved: graceful preemption of a TRL job.

Usage: python3 trl_preempt_report.py OUT_DIR. Prints one line per check and exits 1 if any
failed.
"""

import json
import re
import sys
import tarfile
from pathlib import Path

out = Path(sys.argv[1])
results = []


def check(name, ok, detail=""):
    results.append(ok)
    print(f"{'PASS' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}")


jobs = json.loads((out / "jobs.json").read_text())
jobs = jobs["items"] if isinstance(jobs, dict) else jobs
phase = {j["metadata"]["name"]: j["status"]["phase"] for j in jobs}
check("both jobs succeeded", phase.get("sft-low") == "Succeeded" and phase.get("urgent") == "Succeeded", str(phase))

events = json.loads((out / "events-sft-low.json").read_text())
events = events["items"] if isinstance(events, dict) else events
for e in events:
    print("  event", e.get("at"), e.get("reason"), "->", e.get("to"), "|", e.get("message", "")[:160])
preempted = [e for e in events if e.get("to") == "Preempted"]
check("sft-low preempted exactly once", len(preempted) == 1, preempted[0].get("message", "") if preempted else "")
requeued = [e for e in events if e.get("reason") == "Requeued"]
check("sft-low requeued with a checkpoint", bool(requeued) and "checkpoint-" in requeued[0].get("message", ""),
      requeued[0].get("message", "") if requeued else "none")

logs = {}
with tarfile.open(out / "jobs.tgz") as t:
    for m in t.getmembers():
        if m.name.endswith(".log") and "sft-low" in m.name:
            logs[m.name] = t.extractfile(m).read().decode(errors="replace")
first = next((v for k, v in sorted(logs.items()) if "attempt-1/" in k), "")
second = next((v for k, v in sorted(logs.items()) if "attempt-2/" in k), "")
saves = re.findall(r"ferry: checkpoint-(\d+) saved after SIGTERM", first)
ranks = int(re.search(r"gpusPerNode: (\d+)", (out / "low.yaml").read_text()).group(1))
check("attempt 1 saved a checkpoint on SIGTERM", bool(saves),
      f"checkpoint-{saves[0]}" if saves else "\n".join(first.splitlines()[-15:]))
check("every rank stopped at the same step", len(saves) == ranks and len(set(saves)) == 1,
      f"{ranks} rank(s): {saves}")
saved = int(saves[0]) if saves else None
check("that checkpoint is not a periodic one (every 500)", saved is not None and saved % 500 != 0, str(saved))
started = [e for e in events if e.get("reason") == "Started" and "attempt 2" in e.get("message", "")]
steps = int(re.search(r"steps: (\d+)", (out / "low.yaml").read_text()).group(1))
progress = [int(n) for n in re.findall(rf"\b(\d+)/{steps} \[[^\]]*(?:it/s|s/it)\]", second) if int(n) > 0]
check("attempt 2 resumed from it", saved is not None and bool(started)
      and started[0]["message"].endswith(f"checkpoint-{saved}") and bool(progress) and progress[0] >= saved,
      f"first step shown by attempt 2: {progress[:1]}")
final = max((int(s) for s in re.findall(r"checkpoint-(\d+)/trainer_state.json",
                                             (out / "checkpoints.txt").read_text())), default=0)
check("training reached its last step", final == steps,
      f"newest checkpoint {final}")
zero = re.search(r"zero: (\d+)", (out / "low.yaml").read_text())
if zero:
    files = (out / "checkpoint-files.txt").read_text()
    config = json.loads((out / "ds_config.json").read_text())
    check(f"DeepSpeed ZeRO-{zero.group(1)} ran and wrote that checkpoint",
          config["zero_optimization"]["stage"] == int(zero.group(1))
          and f"checkpoint-{saved}/global_step{saved}/" in files,
          "; ".join(l.rsplit("/", 2)[-2] + "/" + l.rsplit("/", 1)[-1]
                    for l in files.splitlines() if f"checkpoint-{saved}/global_step" in l)[:300])
metrics = json.loads((out / "metrics-sft-low.json").read_text() or "[]")
metrics = metrics["items"] if isinstance(metrics, dict) else metrics
check("the Trainer's logs reached the store as metrics lines",
      len(metrics) > 10 and "loss" in json.dumps(metrics[-1]) and "max_steps" in json.dumps(metrics[-1]),
      f"{len(metrics)} lines, last {json.dumps(metrics[-1])[:200] if metrics else None}")
etas = re.findall(r"eta sft-low: (\S+)", (out / "progress.log").read_text())
check("the running job got an expected completion time from its pace",
      any(e != "None" for e in etas), f"{sum(e != 'None' for e in etas)} of {len(etas)} polls")
print(f"{sum(results)} passed, {len(results) - sum(results)} failed")
sys.exit(0 if all(results) else 1)
