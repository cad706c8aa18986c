#!/usr/bin/env bash
# Every run of issue 9 on one multi-GPU host, in one go (docs/multi-gpu.md):
#   convert  Megatron-Core GPT trained at TP=2/PP=2 over NCCL, saved legacy + torch_dist,
#            converted by `ferry convert`, logits compared with transformers (bar 1e-3)
#   mem      Megatron-Core training steps at TP=2 and TP=2/PP=2: peak memory per GPU
#   ferry    `ferry up` on the host's GPUs; a 4-GPU DDP+FSDP job, a 2-node x 2-GPU job queued
#            behind it; jobs, events, describe and every rank's log saved
# Run from the repository root. Needs: python3 with torch + transformers (+ megatron-core, from
# .whl/ when present), the ferry binary ($FERRY, default .carry/ferry), 4 GPUs.
# Results: $R (default /tmp/gpu-results), packed into $OUT/results.tgz after every stage.
#   STAGES="convert mem ferry" scripts/gpu/run_all.sh
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
ROOT=$(pwd)
OUT=${OUT:-/tmp/gpu-out}
R=${GPU_RESULTS:-/tmp/gpu-results}
export GPU_RESULTS=$R
FERRY=${FERRY:-$ROOT/.carry/ferry}
STAGES=${STAGES:-"convert ferry mem"}
NGPU=${NGPU:-$(nvidia-smi -L | grep -c '^GPU')}
if [ "$NGPU" -ge 4 ]; then
  NGPU=4
  CONVERT_LAYOUTS=${CONVERT_LAYOUTS:-"2:2"}
  MEM_RUNS=${MEM_RUNS:-"Meta-Llama-3-8B:2:1:1:2048:1 Meta-Llama-3-8B:2:2:1:2048:4 Llama-3.2-3B:2:2:1:4096:4 Llama-3.2-1B:2:1:2:2048:1"}
else
  NGPU=2
  CONVERT_LAYOUTS=${CONVERT_LAYOUTS:-"2:1 1:2"}
  MEM_RUNS=${MEM_RUNS:-"Meta-Llama-3-8B:2:1:1:2048:1 Meta-Llama-3-8B:1:2:1:2048:4 Llama-3.2-3B:2:1:1:4096:1 Llama-3.2-1B:1:2:2:2048:4"}
fi
mkdir -p "$OUT" "$R/logs"
T0=$(date +%s)
log() { echo "[$(date -u +%T) +$(( $(date +%s) - T0 ))s] $*"; }
pack() { tar czf "$OUT/results.tgz" -C "$R" --exclude='./mconv-*' --exclude='./ferry-home' . 2>/dev/null
  cp "$R/summary.txt" "$OUT/" 2>/dev/null; true; }
trap pack EXIT
summary() { echo "$*" | tee -a "$R/summary.txt"; }
torchrunN() { n=$1; shift; python3 -m torch.distributed.run --standalone --nproc-per-node "$n" "$@"; }

log "host: $(nproc) cores; $(nvidia-smi -L | wc -l) GPUs"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader | tee "$R/gpus.csv"
nvidia-smi topo -m > "$R/topo.txt" 2>&1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 - <<'EOF' | tee "$R/versions.json"
import json, torch, transformers
v = {"torch": torch.__version__, "cuda": torch.version.cuda, "transformers": transformers.__version__,
     "gpus": torch.cuda.device_count(), "nccl": ".".join(map(str, torch.cuda.nccl.version()))}
try:
    import megatron.core as m; v["megatron_core"] = m.__version__
except Exception as e:
    v["megatron_core"] = f"missing: {e}"
print(json.dumps(v))
EOF
"$FERRY" --version | tee -a "$R/versions.json"

for stage in $STAGES; do case $stage in
convert)
  for layout in $CONVERT_LAYOUTS; do
  IFS=: read -r tp pp <<< "$layout"
  log "stage convert: Megatron-Core TP=$tp/PP=$pp training + checkpoints"
  W=$R/mconv-tp$tp-pp$pp; rm -rf "$W"; mkdir -p "$W"
  timeout 180 bash -c "$(declare -f torchrunN); torchrunN $((tp * pp)) scripts/gpu/megatron_convert.py --tp $tp --pp $pp --work '$W'" > "$R/logs/megatron_convert-tp$tp-pp$pp.log" 2>&1
  rc=$?; tail -5 "$R/logs/megatron_convert-tp$tp-pp$pp.log"
  summary "megatron_convert tp=$tp pp=$pp rc=$rc $(cat "$W/train.json" 2>/dev/null | head -c 300)"
  for fmt in legacy torch_dist; do
    timeout 60 "$FERRY" convert "$W/$fmt" "$W/hf-$fmt" > "$R/logs/convert-tp$tp-pp$pp-$fmt.log" 2>&1
    summary "ferry convert tp=$tp pp=$pp $fmt rc=$? $(tail -3 "$R/logs/convert-tp$tp-pp$pp-$fmt.log" | tr '\n' ' ')"
    timeout 30 "$FERRY" convert --inspect "$W/$fmt" > "$R/logs/inspect-tp$tp-pp$pp-$fmt.txt" 2>&1
  done
  mkdir -p "$R/convert-tp$tp-pp$pp"
  cp "$W/hf-legacy/config.json" "$R/convert-tp$tp-pp$pp/converted_config.json" 2>/dev/null
  cp "$W/reference.safetensors" "$W/train.json" "$R/convert-tp$tp-pp$pp/" 2>/dev/null
  timeout 120 python3 scripts/gpu/hf_parity.py --reference "$W/reference.safetensors" \
    --json "$R/convert-tp$tp-pp$pp/parity.json" "$W/hf-legacy" "$W/hf-torch_dist" > "$R/logs/parity-tp$tp-pp$pp.log" 2>&1
  summary "hf parity tp=$tp pp=$pp rc=$? $(grep '^parity' "$R/logs/parity-tp$tp-pp$pp.log" | cut -c1-330)"
  du -sh "$W"/* > "$R/convert-tp$tp-pp$pp/sizes.txt" 2>&1
  done
  pack ;;
mem)
  for run in $MEM_RUNS; do
    IFS=: read -r model tp pp mb seq m <<< "$run"
    log "stage mem: $model tp=$tp pp=$pp mb=$mb seq=$seq micro-batches=$m"
    timeout 120 bash -c "$(declare -f torchrunN); torchrunN $NGPU scripts/gpu/megatron_step.py --model $model --tp $tp --pp $pp \
      --micro-batch $mb --seq $seq --micro-batches $m --probe --out '$R'" > "$R/logs/mem-$model-tp$tp-pp$pp.log" 2>&1
    summary "megatron mem $model tp=$tp pp=$pp rc=$? $(grep '^megatron ' "$R/logs/mem-$model-tp$tp-pp$pp.log" | cut -c1-300)"
    pack
  done ;;
ferry)
  log "stage ferry: ferry up on this host's GPUs"
  export FERRY_URL=http://127.0.0.1:7070
  rm -rf "$R/ferry-home"
  "$FERRY" up --home "$R/ferry-home" --listen 127.0.0.1:7070 > "$R/logs/ferry-up.log" 2>&1 &
  UP=$!
  for _ in $(seq 100); do "$FERRY" get gpus -o json > "$R/ferry_gpus.json" 2>/dev/null && break; sleep 0.2; done
  ngpu=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); g=d.get("gpus", d) if isinstance(d, dict) else d; print(len(g))' "$R/ferry_gpus.json" 2>/dev/null || echo 0)
  summary "ferry gpus ($ngpu): $(tr -d '\n ' < "$R/ferry_gpus.json" | cut -c1-700)"
  if [ "$ngpu" -lt "$NGPU" ]; then
    summary "NVML discovery found $ngpu GPUs; restarting ferry up with --gpus $NGPU (virtual slots)"
    kill "$UP"; wait "$UP" 2>/dev/null
    "$FERRY" up --gpus "$NGPU" --home "$R/ferry-home" --listen 127.0.0.1:7070 >> "$R/logs/ferry-up.log" 2>&1 &
    UP=$!
    for _ in $(seq 100); do "$FERRY" get gpus -o json > "$R/ferry_gpus.json" 2>/dev/null && break; sleep 0.2; done
  fi
  # Jobs sized to this host: all GPUs for llama-dp, 2 "nodes" x NGPU/2 for the gang.
  mkdir -p "$R/jobs"
  sed "s/gpusPerNode: 4/gpusPerNode: $NGPU/" scripts/gpu/jobs/llama-dp.yaml > "$R/jobs/llama-dp.yaml"
  sed "s/gpusPerNode: 2/gpusPerNode: $((NGPU / 2))/" scripts/gpu/jobs/gang-2x2.yaml > "$R/jobs/gang-2x2.yaml"
  "$FERRY" apply -f "$R/jobs/llama-dp.yaml"
  "$FERRY" apply -f "$R/jobs/gang-2x2.yaml"
  end=$(( $(date +%s) + ${FERRY_JOBS_TIMEOUT:-240} ))
  while :; do
    phases=$("$FERRY" get jobs -o json 2>/dev/null | python3 -c 'import json, sys
d = json.load(sys.stdin); items = d if isinstance(d, list) else d.get("items", [])
print(" ".join(j["metadata"]["name"] + "=" + str((j.get("status") or {}).get("phase")) for j in items))')
    case "$phases" in *Pending*|*Queued*|*Running*|*Admitted*|*Restarting*|*Preempted*|"") ;; *) break ;; esac
    [ "$(date +%s)" -ge "$end" ] && { log "jobs still not done: $phases; cancelling"; "$FERRY" cancel llama-dp; "$FERRY" cancel gang-2x2; sleep 5; break; }
    sleep 2
  done
  log "jobs: $phases"
  "$FERRY" get jobs -o json > "$R/jobs.json"
  "$FERRY" get jobs > "$R/jobs.txt"
  for job in llama-dp gang-2x2; do
    "$FERRY" describe job "$job" > "$R/describe-$job.txt" 2>&1
    python3 -c "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen('$FERRY_URL/api/v1/namespaces/default/jobs/$job/events').read().decode())" > "$R/events-$job.json"
    for rank in 0 1 2 3; do "$FERRY" logs "$job" --rank $rank > "$R/logs/$job-rank$rank.log" 2>&1; done
  done
  summary "ferry jobs: $phases"
  python3 scripts/gpu/queue_report.py "$R" | tee -a "$R/summary.txt"
  kill "$UP"; wait "$UP" 2>/dev/null
  pack ;;
esac; done
log "done"
cat "$R/summary.txt"
