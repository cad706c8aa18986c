#!/usr/bin/env bash
# Proves that Ferry itself puts NVLink multicast off in every GPU rank's environment: `ferry up`
# is started with the three variables REMOVED from its own environment, a 2-rank GPU job prints
# what its ranks see, and the script fails unless every rank has NCCL_NVLS_ENABLE=0,
# TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1 (and ran an NCCL all-reduce).
# The job itself never exports them; only the control plane's runtime can have set them.
set -u
FERRY=${FERRY:-$(pwd)/.carry/ferry}
R=${GPU_RESULTS:-/tmp/gpu-env}; OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$R" "$OUT"
export FERRY_URL=http://127.0.0.1:7072
env -u NCCL_NVLS_ENABLE -u TORCH_SYMM_MEM_DISABLE_MULTICAST -u NVSHMEM_DISABLE_NVLS \
  "$FERRY" up --home "$R/home" --listen 127.0.0.1:7072 > "$R/up.log" 2>&1 &
UP=$!
for _ in $(seq 100); do "$FERRY" get gpus -o json > "$R/gpus.json" 2>/dev/null && break; sleep 0.2; done
cat > "$R/job.yaml" <<'YAML'
apiVersion: ferry.dev/v1alpha1
kind: TrainJob
metadata: {name: nvls-env}
spec:
  engine: command
  command: [python3, -c, "import os, json, torch, torch.distributed as d; d.init_process_group('nccl', device_id=torch.device('cuda', 0)); t = torch.ones(1, device='cuda'); d.all_reduce(t); print(json.dumps({k: os.environ.get(k) for k in ('RANK', 'CUDA_VISIBLE_DEVICES', 'NCCL_NVLS_ENABLE', 'TORCH_SYMM_MEM_DISABLE_MULTICAST', 'NVSHMEM_DISABLE_NVLS')} | {'all_reduce': t.item()})); d.destroy_process_group()"]
  resources: {gpusPerNode: 2}
YAML
"$FERRY" apply -f "$R/job.yaml"
for _ in $(seq 120); do
  "$FERRY" get jobs nvls-env -o json 2>/dev/null | grep -q '"phase": "\(Succeeded\|Failed\)"' && break; sleep 0.5
done
"$FERRY" describe job nvls-env | tee "$R/describe.txt" | head -20
ok=1
for rank in 0 1; do
  "$FERRY" logs nvls-env --rank $rank | tee "$R/rank$rank.log"
  python3 -c 'import json, sys
d = json.loads([l for l in open(sys.argv[1]) if l.startswith("{")][-1])
want = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
bad = {k: d.get(k) for k, v in want.items() if d.get(k) != v}
print("rank", d["RANK"], "FAIL" if bad or d["all_reduce"] != 2.0 else "PASS", bad or "all three set by Ferry", "all_reduce", d["all_reduce"])
sys.exit(1 if bad or d["all_reduce"] != 2.0 else 0)' "$R/rank$rank.log" || ok=0
done
kill $UP; wait $UP 2>/dev/null
tar czf "$OUT/env-check.tgz" -C "$R" --exclude=home . 2>/dev/null
[ $ok = 1 ] && echo "ferry env check: PASS" || { echo "ferry env check: FAIL"; exit 1; }
