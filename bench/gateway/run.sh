#!/usr/bin/env bash
# Gateway overhead, side by side in one run on this machine: the same mock upstream
# (ferry-gateway's mock_engine example, zero model delay) and the same load
# generator (examples/loadgen.rs), sent
#   direct  → upstream
#   nginx   → upstream   (Debian package, proxy_pass with upstream keepalive)
#   ferry   → upstream   (ferry-gateway, default prefix policy, health checks on)
#   litellm → upstream   (PyPI, optional: skipped when it does not install)
# Reports p50/p99 added over direct at a moderate concurrency (non-streamed and
# streamed chat), and requests/s at saturation; prints Ferry/nginx ratios.
#
# Targets are measured in ROUNDS interleaved rounds (direct, nginx, ferry, direct,
# ...) and each figure is the median over rounds, so a burst of load from other
# processes hits every target alike. The load average is printed before and after.
#
# Usage: bench/gateway/run.sh   (env: SECONDS_PER_RUN=5, ROUNDS=3, LAT_CONC=8,
#                               SAT_CONC=64, LITELLM=1 to try LiteLLM; 0 skips it;
#                               CARGO_TARGET_DIR honoured)
set -euo pipefail
trap 'echo "bench/gateway/run.sh failed at line $LINENO" >&2' ERR
cd "$(dirname "$0")/../.."
SECS=${SECONDS_PER_RUN:-5}
ROUNDS=${ROUNDS:-3}
LAT_CONC=${LAT_CONC:-8}
SAT_CONC=${SAT_CONC:-64}
TARGET=${CARGO_TARGET_DIR:-target}
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  if [[ -f "$WORK/nginx.pid" ]]; then kill "$(cat "$WORK/nginx.pid")" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

echo "== building (release)"
cargo build -q --release -p ferry-gateway --example mock_engine --example gateway --example loadgen
BIN="$TARGET/release/examples"

if ! command -v nginx >/dev/null; then
  echo "== installing nginx"
  export DEBIAN_FRONTEND=noninteractive
  (apt-get install -y nginx-light >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y nginx-light >/dev/null; }) \
    || apt-get install -y nginx >/dev/null
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)

UP=18601; NGX=18602; FERRY=18603; LLM=18604
wait_port_long() { for _ in $(seq 1 600); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }
wait_port() { for _ in $(seq 1 200); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 never opened" >&2; return 1; }

"$BIN/mock_engine" --listen 127.0.0.1:$UP --model mock --tokens 16 >"$WORK/mock.log" 2>&1 & PIDS+=($!)
wait_port $UP

cat >"$WORK/nginx.conf" <<NGX
worker_processes auto;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log warn;
daemon on;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $WORK/body;
  proxy_temp_path $WORK/proxy;
  fastcgi_temp_path $WORK/fastcgi;
  uwsgi_temp_path $WORK/uwsgi;
  scgi_temp_path $WORK/scgi;
  upstream engine { server 127.0.0.1:$UP; keepalive 128; }
  server {
    listen 127.0.0.1:$NGX;
    location / {
      proxy_pass http://engine;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
NGX
"$NGINX" -c "$WORK/nginx.conf"
wait_port $NGX

"$BIN/gateway" --listen 127.0.0.1:$FERRY --backend mock=http://127.0.0.1:$UP >"$WORK/ferry.log" 2>&1 & PIDS+=($!)
wait_port $FERRY

TARGETS="direct:$UP nginx:$NGX ferry:$FERRY"
if [[ "${LITELLM:-1}" == "1" ]]; then
  echo "== trying LiteLLM (optional)"
  VENV=${LITELLM_VENV:-$WORK/venv}   # LITELLM_VENV: reuse a venv that already has litellm[proxy]
  if [[ -x "$VENV/bin/litellm" ]] || { python3 -m venv "$VENV" >/dev/null 2>&1 \
     && timeout 600 "$VENV/bin/pip" install -q 'litellm[proxy]' >"$WORK/pip.log" 2>&1; }; then
    cat >"$WORK/litellm.yaml" <<LLMCFG
model_list:
  - model_name: mock
    litellm_params: {model: openai/mock, api_base: "http://127.0.0.1:$UP/v1", api_key: none}
LLMCFG
    "$VENV/bin/litellm" --config "$WORK/litellm.yaml" --host 127.0.0.1 --port $LLM >"$WORK/litellm.log" 2>&1 & PIDS+=($!)
    if wait_port_long $LLM && sleep 2; then TARGETS="$TARGETS litellm:$LLM"; else echo "   LiteLLM did not start; skipped"; fi
  else
    echo "   LiteLLM did not install; skipped"
  fi
fi

run() { # name port concurrency stream
  local extra=()
  [[ "$4" == 1 ]] && extra=(--stream)
  "$BIN/loadgen" --url "http://127.0.0.1:$2/v1/chat/completions" --model mock \
    --concurrency "$3" --seconds "$SECS" --warmup 2 "${extra[@]}"
}

RESULTS="$WORK/results.txt"
: >"$RESULTS"
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for round in $(seq 1 "$ROUNDS"); do
  for mode in "lat:$LAT_CONC:0" "stream:$LAT_CONC:1" "sat:$SAT_CONC:0"; do
    IFS=: read -r kind conc stream <<<"$mode"
    for t in $TARGETS; do
      name=${t%%:*}; port=${t##*:}
      line=$(run "$name" "$port" "$conc" "$stream")
      echo "== round $round $name $kind (concurrency $conc): $line"
      echo "$name $kind $line" >>"$RESULTS"
    done
  done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$RESULTS" "$(nproc)" "$ROUNDS" "$SECS" "$LOAD_BEFORE" "$LOAD_AFTER" <<'PY'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    name, kind, js = line.split(" ", 2)
    runs.setdefault((name, kind), []).append(json.loads(js))
rows = {
    k: {f: statistics.median(r[f] for r in v) for f in ("rps", "p50_ms", "p99_ms", "errors")}
    for k, v in runs.items()
}
for v in rows.values():
    v["errors"] = int(v["errors"])
names = [n for n in ["direct", "nginx", "ferry", "litellm"] if (n, "lat") in rows]
print(f"\nGateway overhead on {sys.argv[2]} cores (mock upstream, same load generator); "
      f"median of {sys.argv[3]} interleaved rounds of {sys.argv[4]} s; load average {sys.argv[5]} before, {sys.argv[6]} after")
print(f"{'target':8} {'p50 ms':>8} {'p99 ms':>8} {'+p50':>7} {'+p99':>7} | {'stream p50':>10} {'p99':>7} {'+p50':>7} {'+p99':>7} | {'sat rps':>8} {'errors':>6}")
d, ds = rows[("direct", "lat")], rows[("direct", "stream")]
added = {}
for n in names:
    l, s, sat = rows[(n, "lat")], rows[(n, "stream")], rows[(n, "sat")]
    a = (l["p50_ms"] - d["p50_ms"], l["p99_ms"] - d["p99_ms"], s["p50_ms"] - ds["p50_ms"], s["p99_ms"] - ds["p99_ms"])
    added[n] = a
    err = l["errors"] + s["errors"] + sat["errors"]
    print(f"{n:8} {l['p50_ms']:8.3f} {l['p99_ms']:8.3f} {a[0]:7.3f} {a[1]:7.3f} | {s['p50_ms']:10.3f} {s['p99_ms']:7.3f} {a[2]:7.3f} {a[3]:7.3f} | {sat['rps']:8.0f} {err:6d}")
f, g = added["ferry"], added["nginx"]
rf, rn = rows[("ferry", "sat")]["rps"], rows[("nginx", "sat")]["rps"]
def ratio(a, b):
    return f"{a / b:.2f}x" if b > 0.01 else f"n/a (nginx adds {b:+.3f} ms)"
print(f"\nferry/nginx: added p50 {ratio(f[0], g[0])}, added p99 {ratio(f[1], g[1])} (non-streamed); "
      f"streamed added p50 {ratio(f[2], g[2])}, p99 {ratio(f[3], g[3])}; saturation rps {ratio(rf, rn)}")
if "litellm" in added:
    rl = rows[("litellm", "sat")]["rps"]
    print(f"ferry/litellm: added p50 {ratio(f[0], added['litellm'][0])}, saturation rps {ratio(rf, rl)}")
print(f"goal (issue 8): ferry added p99 <= nginx's: {'met' if f[1] <= g[1] else 'NOT met'}; ferry rps >= nginx's: {'met' if rf >= rn else 'NOT met'}")
PY
