"""Sleeps N seconds as 'steps', printing Ferry metrics lines and checkpointing.

Each step is one second. A checkpoint directory `step-<k>` is written to
FERRY_CHECKPOINT_DIR every 5 steps (to a temporary name, then renamed), and a
restarted attempt continues from FERRY_RESUME_FROM. SIGTERM writes a final
checkpoint before exiting, as a preemptible engine should; SLEEPER_TERM_DELAY
seconds (default 0) make that checkpoint slow, as a large model's is.
"""

import json
import os
import signal
import sys
import time

total = int(sys.argv[1]) if len(sys.argv) > 1 else 30
ckpt_dir = os.environ.get("FERRY_CHECKPOINT_DIR")
step = 0
resume = os.environ.get("FERRY_RESUME_FROM")
if resume:
    with open(os.path.join(resume, "step.txt")) as f:
        step = int(f.read())
    print(f"resumed from {resume} at step {step}", flush=True)


def checkpoint():
    if not ckpt_dir:
        return
    final = os.path.join(ckpt_dir, f"step-{step}")
    tmp = final + ".tmp"
    os.makedirs(tmp, exist_ok=True)
    with open(os.path.join(tmp, "step.txt"), "w") as f:
        f.write(str(step))
    if not os.path.exists(final):
        os.rename(tmp, final)


def on_term(signum, frame):
    delay = float(os.environ.get("SLEEPER_TERM_DELAY", "0"))
    if delay:
        print(f"SIGTERM: checkpointing step {step} for {delay:g} s", flush=True)
        time.sleep(delay)
    checkpoint()
    print(f"SIGTERM at step {step}: checkpoint written", flush=True)
    sys.exit(143)


signal.signal(signal.SIGTERM, on_term)
while step < total:
    time.sleep(1)
    step += 1
    print(json.dumps({"step": step, "loss": 1.0 / step}), flush=True)
    if step % 5 == 0:
        checkpoint()
print("done", flush=True)
