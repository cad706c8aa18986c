#!/usr/bin/env bash
# Second set of planner rows (validation: shapes not used when the memory model was revised):
# DDP/FSDP rows through torchrun, then Megatron-Core rows. Results under $R, packed to $OUT.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-out}; R=${GPU_RESULTS:-/tmp/gpu-results-2}; mkdir -p "$OUT" "$R/logs"
NGPU=$(nvidia-smi -L | grep -c '^GPU')
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
trap 'tar czf "$OUT/results2.tgz" -C "$R" . 2>/dev/null' EXIT
ROWS=${ROWS:-ddp:Llama-3.2-3B:full-mixed:1:2048,ddp:Llama-3.2-3B:full-mixed:2:2048,ddp:Llama-3.2-1B:full-mixed:1:4096,ddp:Meta-Llama-3-8B:full-bf16:1:2048,fsdp:Llama-3.2-3B:full-mixed:1:4096,fsdp:Meta-Llama-3-8B:full-mixed:2:2048}
timeout 300 python3 -m torch.distributed.run --standalone --nproc-per-node "$NGPU" scripts/gpu/llama_dist.py \
  --probe --out "$R" --rows "$ROWS" > "$R/logs/dp.log" 2>&1
echo "dp rc=$?"; grep '^row' "$R/logs/dp.log"
for run in ${MEM_RUNS:-Llama-3.2-3B:1:2:1:4096:4 Meta-Llama-3-8B:2:1:2:2048:1}; do
  IFS=: read -r model tp pp mb seq m <<< "$run"
  timeout 100 python3 -m torch.distributed.run --standalone --nproc-per-node "$NGPU" scripts/gpu/megatron_step.py \
    --model $model --tp $tp --pp $pp --micro-batch $mb --seq $seq --micro-batches $m --probe --out "$R" \
    > "$R/logs/mem-$model-tp$tp-pp$pp.log" 2>&1
  echo "mem $run rc=$?"; grep '^megatron ' "$R/logs/mem-$model-tp$tp-pp$pp.log"
done
