#!/usr/bin/env bash
# Gateway overhead, side by side in one run: the same mock upstream (ferry-gateway's
# mock_engine example, zero model delay) and the same closed-loop load generator
# (examples/loadgen.rs), sent
#   direct  → upstream
#   nginx   → upstream   (Debian package, proxy_pass with upstream keepalive)
#   ferry   → upstream   (ferry-gateway: default prefix policy, health checks on)
#   litellm → upstream   (PyPI litellm[proxy], optional: skipped when it does not
#                         install or start)
# Reports latency added over direct at a moderate concurrency (non-streamed and
# streamed chat), requests/s at saturation, and proxy CPU time per request; prints
# the ratios Ferry/nginx and LiteLLM/nginx.
#
# Fairness: every proxy gets the same cores (PROXY_CPUS, `taskset`) and as many
# workers as it has cores there (nginx worker_processes, ferry --workers; LiteLLM
# runs one worker, see below). When the machine has 6 or more cores, the upstream and the load
# generator run on other cores, so the proxy is what saturates; on smaller
# machines everything shares the cores (the figures then also charge the proxy's
# CPU use against the upstream's and the load generator's).
#
# Noise: targets are measured in ROUNDS interleaved rounds (each round rotates the
# order), every figure is the median over rounds, and the spread of the per-round
# Ferry/nginx saturation ratio is printed.
#
# Usage: bench/gateway/run.sh
#   env: SECONDS_PER_RUN=4 WARMUP=1 ROUNDS=5 LAT_CONC=8 SAT_CONC=64
#        PROXY_CPUS=0,1 (default: 0,1 when there are >= 6 cores, else all)
#        BIN_DIR=dir with prebuilt mock_engine, gateway, loadgen (skips cargo)
#        NGINX_BIN=path to an nginx binary (default: installed one; apt-get if none)
#        LITELLM=1 (0 skips it), LITELLM_VENV=venv with litellm[proxy] to reuse,
#        LITELLM_WHEELS=dir of wheels for an offline install
#        CARGO_TARGET_DIR honoured
set -euo pipefail
trap 'echo "bench/gateway/run.sh failed at line $LINENO" >&2' ERR
cd "$(dirname "$0")/../.."
. bench/gateway/nginx-conf.sh
SECS=${SECONDS_PER_RUN:-4}
WARMUP=${WARMUP:-1}
ROUNDS=${ROUNDS:-5}
LAT_CONC=${LAT_CONC:-8}
SAT_CONC=${SAT_CONC:-64}
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  if [[ -f "$WORK/nginx.pid" ]]; then kill "$(cat "$WORK/nginx.pid")" 2>/dev/null || true; fi
  sleep 0.2
  rm -rf "$WORK"
}
trap cleanup EXIT

# --- cores -------------------------------------------------------------------
NCPU=$(nproc)
if [[ -n "${PROXY_CPUS:-}" ]]; then
  PINNED=yes
  UP_CPUS=${UP_CPUS:-all}
  LG_CPUS=${LG_CPUS:-all}
elif (( NCPU >= 6 )); then
  PINNED=yes
  PROXY_CPUS=0,1
  half=$(( (NCPU - 2) / 2 ))
  UP_CPUS=2-$((1 + half))
  LG_CPUS=$((2 + half))-$((NCPU - 1))
else
  PINNED=no
  PROXY_CPUS=0-$((NCPU - 1)); UP_CPUS=$PROXY_CPUS; LG_CPUS=$PROXY_CPUS
fi
count_cpus() { # "0,1" / "2-7" / "0-1,4" -> number of cpus
  local n=0 part
  IFS=, read -ra parts <<<"$1"
  for part in "${parts[@]}"; do
    if [[ "$part" == *-* ]]; then n=$((n + ${part#*-} - ${part%-*} + 1)); else n=$((n + 1)); fi
  done
  echo "$n"
}
# Command prefixes that pin to a core list (empty when unpinned). Arrays rather than a
# function, so that `$!` of a background start is the program's own pid.
pin_to() { if [[ "$1" == all ]]; then echo ""; else echo "taskset -c $1"; fi; }
read -ra PIN_PROXY <<<"$(pin_to "$PROXY_CPUS")"
read -ra PIN_UP <<<"$(pin_to "${UP_CPUS:-all}")"
read -ra PIN_LG <<<"$(pin_to "${LG_CPUS:-all}")"
PROXY_N=$(count_cpus "$PROXY_CPUS")
if [[ "$LG_CPUS" == all ]]; then LG_THREADS=1; else LG_THREADS=$(count_cpus "$LG_CPUS"); fi
(( LG_THREADS > 4 )) && LG_THREADS=4
(( LG_THREADS < 1 )) && LG_THREADS=1
[[ "$PINNED" == no ]] && LG_THREADS=1

# --- binaries ----------------------------------------------------------------
if [[ -n "${BIN_DIR:-}" ]]; then
  BIN=$BIN_DIR
else
  echo "== building (release-lto: one codegen unit, fat LTO, the distribution profile)"
  cargo build -q --profile release-lto -p ferry-gateway --example mock_engine --example gateway --example loadgen
  BIN="${CARGO_TARGET_DIR:-target}/release-lto/examples"
fi
if [[ -z "${NGINX_BIN:-}" ]] && ! command -v nginx >/dev/null; then
  echo "== installing nginx"
  export DEBIAN_FRONTEND=noninteractive
  (apt-get install -y nginx-light >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y nginx-light >/dev/null; }) \
    || apt-get install -y nginx >/dev/null
fi
NGINX_BIN=${NGINX_BIN:-$(command -v nginx || echo /usr/sbin/nginx)}

UP=18601; NGX=18602; FERRY=18603; LLM=18604
wait_port() { # port tries sleep
  for _ in $(seq 1 "${2:-200}"); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep "${3:-0.05}"; done
  echo "port $1 never opened" >&2; return 1
}
descendants() { local p; for p in "$@"; do echo "$p"; descendants $(pgrep -P "$p" || true); done; }
ticks() { # sum of utime+stime over every thread of the given pids
  local t=0 f v
  for p in "$@"; do
    for f in /proc/"$p"/task/*/stat; do
      v=$(awk '{print $14 + $15}' "$f" 2>/dev/null) && t=$((t + ${v:-0}))
    done
  done
  echo "$t"
}

"${PIN_UP[@]}" "$BIN/mock_engine" --listen 127.0.0.1:$UP --model mock --tokens 16 >"$WORK/mock.log" 2>&1 & PIDS+=($!)
wait_port $UP

nginx_conf "$WORK" "$NGX" "$UP" "worker_processes $PROXY_N;
daemon on;"
"${PIN_PROXY[@]}" "$NGINX_BIN" -p "$WORK/ngx" -e "$WORK/nginx-error.log" -c "$WORK/nginx.conf"
wait_port $NGX
NGINX_PIDS="$(cat "$WORK/nginx.pid") $(pgrep -P "$(cat "$WORK/nginx.pid")" | tr '\n' ' ')"

"${PIN_PROXY[@]}" "$BIN/gateway" --listen 127.0.0.1:$FERRY --workers "$PROXY_N" \
  --backend mock=http://127.0.0.1:$UP >"$WORK/ferry.log" 2>&1 & FERRY_PID=$!; PIDS+=($FERRY_PID)
wait_port $FERRY

TARGETS="direct:$UP nginx:$NGX ferry:$FERRY"
LLM_KEY=sk-ferry-bench-$RANDOM$RANDOM
LLM_PIDS=""
if [[ "${LITELLM:-1}" == "1" ]]; then
  echo "== trying LiteLLM (optional)"
  VENV=${LITELLM_VENV:-$WORK/venv}
  if [[ ! -x "$VENV/bin/litellm" ]]; then
    if [[ -n "${LITELLM_WHEELS:-}" ]]; then
      python3 -m venv "$VENV" >/dev/null 2>&1 && timeout 600 "$VENV/bin/pip" install -q --no-index \
        --find-links "$LITELLM_WHEELS" 'litellm[proxy]' >"$WORK/pip.log" 2>&1 || true
    else
      python3 -m venv "$VENV" >/dev/null 2>&1 && timeout 600 "$VENV/bin/pip" install -q 'litellm[proxy]' >"$WORK/pip.log" 2>&1 || true
    fi
  fi
  if [[ -x "$VENV/bin/litellm" ]]; then
    # Recent LiteLLM refuses to start without a master key (clients then send it
    # as their API key); the cost map is read from the package instead of fetched
    # (offline, the fetch retries for ~15 s). One worker: with --num_workers 2
    # (1.108.7) the proxy never opened its port within 6 minutes here.
    cat >"$WORK/litellm.yaml" <<LLMCFG
model_list:
  - model_name: mock
    litellm_params: {model: openai/mock, api_base: "http://127.0.0.1:$UP/v1", api_key: none}
general_settings:
  master_key: $LLM_KEY
litellm_settings:
  telemetry: false
LLMCFG
    t0=$(date +%s)
    "${PIN_PROXY[@]}" env LITELLM_LOCAL_MODEL_COST_MAP=True LITELLM_LOG=ERROR "$VENV/bin/litellm" \
      --config "$WORK/litellm.yaml" --host 127.0.0.1 --port $LLM --num_workers 1 \
      >"$WORK/litellm.log" 2>&1 & LLM_PID=$!; PIDS+=($LLM_PID)
    if wait_port $LLM 1800 0.1 && curl -sf -m 30 -o /dev/null "http://127.0.0.1:$LLM/v1/chat/completions" \
         -H "authorization: Bearer $LLM_KEY" -H 'content-type: application/json' \
         -d '{"model":"mock","messages":[{"role":"user","content":"hi"}],"max_tokens":4}'; then
      echo "   LiteLLM $("$VENV/bin/pip" show litellm 2>/dev/null | awk '/^Version/{print $2}') answered $(( $(date +%s) - t0 )) s after start"
      TARGETS="$TARGETS litellm:$LLM"
      LLM_PIDS=$(descendants "$LLM_PID" | tr '\n' ' ')
    else
      echo "   LiteLLM did not answer; skipped. Last lines of its log:"; tail -5 "$WORK/litellm.log" | sed 's/^/     /'
    fi
  else
    echo "   LiteLLM did not install; skipped"
  fi
fi

pids_of() { case $1 in nginx) echo "$NGINX_PIDS";; ferry) echo "$FERRY_PID";; litellm) echo "$LLM_PIDS";; *) echo "";; esac; }
run() { # name port concurrency stream
  local extra=()
  [[ "$4" == 1 ]] && extra=(--stream)
  [[ "$1" == litellm ]] && extra+=(--key "$LLM_KEY")
  "${PIN_LG[@]}" "$BIN/loadgen" --url "http://127.0.0.1:$2/v1/chat/completions" --model mock \
    --concurrency "$3" --seconds "$SECS" --warmup "$WARMUP" --threads "$LG_THREADS" "${extra[@]}"
}

echo "== $NCPU cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)); proxies on cpus $PROXY_CPUS" \
     "($PROXY_N workers each), upstream on $UP_CPUS, load generator on $LG_CPUS ($LG_THREADS threads); pinned: $PINNED"
RESULTS="$WORK/results.txt"
: >"$RESULTS"
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
read -ra TLIST <<<"$TARGETS"
NT=${#TLIST[@]}
for round in $(seq 1 "$ROUNDS"); do
  for mode in "lat:$LAT_CONC:0" "stream:$LAT_CONC:1" "sat:$SAT_CONC:0"; do
    IFS=: read -r kind conc stream <<<"$mode"
    for i in $(seq 0 $((NT - 1))); do
      t=${TLIST[$(( (i + round - 1) % NT ))]}
      name=${t%%:*}; port=${t##*:}
      pids=$(pids_of "$name")
      c0=0; [[ -n "$pids" ]] && c0=$(ticks $pids)
      line=$(run "$name" "$port" "$conc" "$stream")
      c1=0; [[ -n "$pids" ]] && c1=$(ticks $pids)
      echo "== round $round $name $kind (concurrency $conc): $line"
      echo "$round $name $kind $((c1 - c0)) $line" >>"$RESULTS"
    done
  done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$RESULTS" "$NCPU" "$ROUNDS" "$SECS" "$WARMUP" "$LOAD_BEFORE" "$LOAD_AFTER" "$(getconf CLK_TCK)" \
  "$PROXY_CPUS" "$PINNED" <<'PY'
import json, statistics as st, sys
path, ncpu, rounds, secs, warm, lb, la, hz, pcpus, pinned = sys.argv[1:]
hz, secs, warm = int(hz), float(secs), float(warm)
runs, per_round = {}, {}
for line in open(path):
    rnd, name, kind, ticks, js = line.split(" ", 4)
    r = json.loads(js)
    # CPU ticks cover warm-up + measured seconds; requests counted over the measured part.
    reqs = r["rps"] * (secs + warm)
    r["cpu_us"] = int(ticks) / hz * 1e6 / reqs if reqs > 0 and int(ticks) > 0 else float("nan")
    runs.setdefault((name, kind), []).append(r)
    per_round.setdefault((name, kind), {})[int(rnd)] = r
med = lambda v, f: st.median(x[f] for x in v)
rows = {k: {f: med(v, f) for f in ("rps", "p50_ms", "p99_ms", "cpu_us")} | {"errors": sum(x["errors"] for x in v)}
        for k, v in runs.items()}
names = [n for n in ["direct", "nginx", "ferry", "litellm"] if (n, "lat") in rows]
print(f"\nGateway overhead: {ncpu} cores, proxies on cpus {pcpus} (pinned: {pinned}); median of {rounds} "
      f"interleaved rounds of {secs:g} s (+{warm:g} s warm-up); load average {lb} before, {la} after")
print(f"{'target':8} {'p50 ms':>8} {'p99 ms':>8} {'+p50':>7} {'+p99':>7} | {'stream p50':>10} {'p99':>7} "
      f"{'+p50':>7} {'+p99':>7} | {'sat rps':>8} {'cpu us/req':>10} {'errors':>6}")
d, ds = rows[("direct", "lat")], rows[("direct", "stream")]
added = {}
for n in names:
    l, s, sat = rows[(n, "lat")], rows[(n, "stream")], rows[(n, "sat")]
    a = (l["p50_ms"] - d["p50_ms"], l["p99_ms"] - d["p99_ms"], s["p50_ms"] - ds["p50_ms"], s["p99_ms"] - ds["p99_ms"])
    added[n] = a
    err = l["errors"] + s["errors"] + sat["errors"]
    cpu = "" if n == "direct" else f"{sat['cpu_us']:.1f}"
    print(f"{n:8} {l['p50_ms']:8.3f} {l['p99_ms']:8.3f} {a[0]:7.3f} {a[1]:7.3f} | {s['p50_ms']:10.3f} {s['p99_ms']:7.3f} "
          f"{a[2]:7.3f} {a[3]:7.3f} | {sat['rps']:8.0f} {cpu:>10} {err:6d}")
def ratio(a, b):
    return f"{a / b:.2f}x" if b > 0.01 else f"n/a (nginx adds {b:+.3f} ms)"
g = added["nginx"]
rn = rows[("nginx", "sat")]["rps"]
for n in [x for x in ("ferry", "litellm") if x in added]:
    f = added[n]
    rf = rows[(n, "sat")]["rps"]
    pr = [per_round[(n, "sat")][k]["rps"] / per_round[("nginx", "sat")][k]["rps"]
          for k in sorted(per_round[(n, "sat")]) if k in per_round[("nginx", "sat")]]
    print(f"\n{n}/nginx: added p50 {ratio(f[0], g[0])}, added p99 {ratio(f[1], g[1])} (non-streamed); "
          f"streamed added p50 {ratio(f[2], g[2])}, p99 {ratio(f[3], g[3])}; saturation rps {rf / rn:.3g}x "
          f"(per round {min(pr):.3g}x..{max(pr):.3g}x); cpu per request "
          f"{rows[(n, 'sat')]['cpu_us'] / rows[('nginx', 'sat')]['cpu_us']:.3g}x")
f = added["ferry"]
rf = rows[("ferry", "sat")]["rps"]
print(f"goal (issue 8): ferry added p99 <= nginx's: {'met' if f[1] <= g[1] else 'NOT met'}; "
      f"ferry rps >= nginx's: {'met' if rf >= rn else 'NOT met'}")
PY
