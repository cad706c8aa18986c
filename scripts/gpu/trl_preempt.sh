#!/usr/bin/env bash
# Issue 6 bar 4 with a real launcher engine on a real GPU (docs/multi-gpu.md, section 4):
# `ferry up` on this host's GPUs; a low-priority `engine: torchrun` LoRA job (Ferry's
# planner renders torchrun + TRL's SFT script) fine-tunes the model Ferry's own built-in engine
# trained on CPU (`ferry demo`); a high-priority job arrives and takes the GPU; the TRL job is
# stopped with SIGTERM, saves a checkpoint at the end of its current step (ferry_trainer.py),
# is requeued and resumes from that checkpoint after the urgent job, then finishes.
# Needs: python3 with torch, transformers, peft, accelerate, pyarrow; TRL, datasets, dill and
# multiprocess as wheels in .whl/ (installed here); the ferry binary ($FERRY, default
# .carry/ferry); the demo model in .carry/demo-model (a `ferry demo --keep` checkpoint's
# config, weights and tokenizer files); GPUS GPUs (default 1). Results: $OUT/results.tgz and
# $OUT/report.txt. Knobs: ENGINE (torchrun, or deepspeed: ZeRO stage ZERO, default 2, through the
# HF Trainer under torchrun; needs the deepspeed wheel and its pure-Python dependencies in
# .whl/; or swift: ms-swift's `swift sft` under Ferry's torchrun launch, with ms-swift 4.6 and
# the versions it pins — TRL < 1.0, PEFT < 0.21, datasets < 4.8.5 — as wheels in WHL, default
# .whl), FERRY_GZ (a gzipped ferry binary, unpacked to $FERRY), STEPS (1500), WAIT_TRAIN / WAIT_DONE (seconds), and for a dry run
# without GPUs SKIP_INSTALL=1 SITE=<stand-in packages> UP_ARGS="--gpus 1" with a stand-in
# torchrun on PATH.
set -u
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
ROOT=$(pwd)
FINAL=${OUT:-/tmp/trl-out}
OUT=$(mktemp -d)
# Everything is packed into one file: a device run returns only a few files.
trap 'tar czf "$FINAL/results.tgz" -C "$OUT" . 2>/dev/null; cp "$OUT/report.txt" "$FINAL/" 2>/dev/null' EXIT
mkdir -p "$FINAL"
FERRY=${FERRY:-$ROOT/.carry/ferry}
if [ -n "${FERRY_GZ:-}" ]; then gunzip -c "$FERRY_GZ" > "$FERRY" && chmod +x "$FERRY" || exit 1; fi
WHL=${WHL:-.whl}
STEPS=${STEPS:-1500}
mkdir -p "$OUT"
T0=$(date +%s)
log() { echo "[$(date -u +%T) +$(( $(date +%s) - T0 ))s] $*"; }

SITE=${SITE:-/tmp/site}
if [ -z "${SKIP_INSTALL:-}" ]; then
# By name from .whl/: pip picks the wheel built for this python where there are several.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
  --find-links "$WHL" trl datasets dill multiprocess || exit 1
if [ "${ENGINE:-torchrun}" = swift ]; then
  # WHL holds ms-swift and what it needs that this python lacks, or has in a version it
  # refuses (the resolver's closure less the host's packages; oss2's chain left out).
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
    "$WHL"/*.whl || exit 1
  PYTHONPATH=$SITE python3 -c "from swift.pipelines import sft_main" || { log "ms-swift does not import"; exit 1; }
fi
if [ "${ENGINE:-torchrun}" = deepspeed ]; then
  # Only what this python lacks: the wheels of other Python versions are skipped by pip.
  for m in deepspeed:deepspeed hjson:hjson cpuinfo:py_cpuinfo einops:einops msgpack:msgpack ninja:ninja \
    "pydantic:pydantic pydantic_core annotated_types typing_inspection typing_extensions"; do
    python3 -c "import ${m%%:*}" 2>/dev/null && continue
    # shellcheck disable=SC2086 # several wheel names
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" \
      --find-links .whl ${m#*:} || exit 1
  done
fi
fi
export PYTHONPATH=$SITE
python3 - <<'EOF' > "$OUT/versions.txt" 2>&1
import importlib, inspect
for m in ["torch", "transformers", "trl", "datasets", "peft", "accelerate", "pyarrow", "fsspec", "deepspeed", "swift"]:
    try:
        print(m, importlib.import_module(m).__version__)
    except Exception as e:
        print(m, "not importable:", e)
import transformers
print("TrainingArguments.enable_jit_checkpoint:", "enable_jit_checkpoint" in inspect.signature(transformers.TrainingArguments).parameters)
try:
    import transformers.trainer_jit_checkpoint as j
    open("/tmp/trl-out-jit.py", "w").write(inspect.getsource(j))
except Exception as e:
    print("no trainer_jit_checkpoint:", e)
EOF
cp /tmp/trl-out-jit.py "$OUT/trainer_jit_checkpoint.py" 2>/dev/null
command -v torchrun || { log "no torchrun on PATH"; exit 1; }

W=$(mktemp -d)
cp -r .carry/demo-model "$W/model"
cp crates/engine/data/chat.jsonl "$W/chat.jsonl"
export FERRY_HOME="$W/home" FERRY_URL=http://127.0.0.1:7070
"$FERRY" up ${UP_ARGS:-} --listen 127.0.0.1:7070 > "$OUT/ferry-up.log" 2>&1 &
UP=$!
for _ in $(seq 100); do "$FERRY" get gpus > /dev/null 2>&1 && break; sleep 0.2; done

cat > "$W/low.yaml" <<EOF
apiVersion: ferry.dev/v1alpha1
kind: TrainJob
metadata: {name: sft-low}
spec:
  engine: ${ENGINE:-torchrun}
  method: lora
  model: {source: path, path: $W/model}
  data: {path: $W/chat.jsonl, format: chat}
  priority: low
  resources: {nodes: 1, gpusPerNode: ${GPUS:-1}, gpu: H200}
  train: {seqLen: 256, lr: 2e-4, steps: $STEPS}
  checkpoint: {every: 500, keep: 3}
$( [ "${ENGINE:-torchrun}" = deepspeed ] && echo "  parallelism: {zero: ${ZERO:-2}}" )
$( [ "${ENGINE:-torchrun}" = swift ] && echo "  extraArgs: [--model_type, llama, --template, chatml]" )
  onFailure: {maxRestarts: 0, graceSeconds: 60, resume: latest}
  env: {PYTHONPATH: $SITE, HF_HUB_OFFLINE: "1", HF_DATASETS_OFFLINE: "1", PYTHONUNBUFFERED: "1"}
EOF
cat > "$W/high.yaml" <<EOF
apiVersion: ferry.dev/v1alpha1
kind: TrainJob
metadata: {name: urgent}
spec:
  engine: command
  command: [python3, -c, "import time, torch; x = torch.ones(1, device='cuda'); time.sleep(5); print('urgent done', x.item())"]
  priority: high
  resources: {nodes: 1, procsPerNode: 1, gpusPerNode: 1}
EOF
cp "$W/low.yaml" "$W/high.yaml" "$OUT/"
phases() { "$FERRY" get jobs -o json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); d=d["items"] if isinstance(d,dict) else d; print(" ".join(j["metadata"]["name"]+"="+j["status"]["phase"] for j in d))'; }
eta() { "$FERRY" get jobs -o json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); d=d["items"] if isinstance(d,dict) else d; print(" ".join("eta "+j["metadata"]["name"]+": "+str(j["status"].get("estimatedCompletionTime")) for j in d))'; }
progress() { { log "$(phases)"; eta; "$FERRY" get jobs -o wide; "$FERRY" logs sft-low 2>&1 | tail -n 4; } >> "$OUT/progress.log"; }
"$FERRY" apply -f "$W/low.yaml" > "$OUT/apply-low.txt" 2>&1
log "waiting (at most ${WAIT_TRAIN:-180} s) for sft-low to log training steps"
for i in $(seq "${WAIT_TRAIN:-180}"); do
  "$FERRY" logs sft-low 2>/dev/null | grep -q "'loss'" && break
  case "$(phases)" in *sft-low=Failed*) break;; esac
  [ $((i % 10)) = 0 ] && progress
  sleep 1
done
progress
log "applying the urgent job: $(phases)"
"$FERRY" apply -f "$W/high.yaml" > "$OUT/apply-high.txt" 2>&1
for i in $(seq "${WAIT_DONE:-240}"); do
  p=$(phases)
  case "$p" in *sft-low=Succeeded*|*sft-low=Failed*) break;; esac
  [ $((i % 5)) = 0 ] && progress
  sleep 1
done
log "final: $p"
curl -s "$FERRY_URL/api/v1/namespaces/default/jobs/sft-low/metrics" > "$OUT/metrics-sft-low.json"
"$FERRY" get jobs -o json > "$OUT/jobs.json"
for j in sft-low urgent; do
  curl -s "$FERRY_URL/api/v1/namespaces/default/jobs/$j/events" > "$OUT/events-$j.json"
  "$FERRY" describe job "$j" > "$OUT/describe-$j.txt" 2>&1
done
(cd "$FERRY_HOME" && find jobs \( -name '*.log' -o -name trainer_state.json -o -name '*.json' -path '*attempt-*' \) -size -2M \
  | tar czf "$OUT/jobs.tgz" -T -)
find "$FERRY_HOME" -path '*checkpoint-*' -name trainer_state.json | sort > "$OUT/checkpoints.txt"
find "$FERRY_HOME/jobs" -path '*/checkpoints/checkpoint-*' | sort > "$OUT/checkpoint-files.txt"
find "$FERRY_HOME/jobs" -name ds_config.json -exec cp {} "$OUT/" \; -quit
kill "$UP"; wait "$UP" 2>/dev/null
case "$p" in *sft-low=Failed*) tail -n 60 "$(find "$FERRY_HOME/jobs" -name rank-0.log -path '*sft-low*' | sort | tail -n 1)";; esac
python3 "$ROOT/scripts/gpu/trl_preempt_report.py" "$OUT" | tee "$OUT/report.txt"
