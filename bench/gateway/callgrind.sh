#!/usr/bin/env bash
# User-space instructions per proxied request, under callgrind: the gateway
# (`examples/gateway.rs`, one worker) and nginx (one process: no master, one
# worker, proxy_pass with upstream keep-alive, as in run.sh) in front of the
# zero-delay mock upstream, driven by `examples/loadgen.rs` with a fixed request
# count. Counters are zeroed after a warm-up batch and dumped after the measured
# batch, so start-up is not counted; Ferry's health checks and load polling are
# (a few per second). Prints one line per proxy and body kind:
# `<proxy> <kind> Ir/request <n>`, then the Ferry/nginx ratios.
#
# Usage: bench/gateway/callgrind.sh
#   env: REQUESTS=3000 WARM_REQUESTS=300 CONC=8 PROXIES="ferry nginx"
#        NGINX_BIN=path to nginx (default: the installed one; skipped if none)
#        BIN_DIR=dir with prebuilt mock_engine, gateway, loadgen (skips cargo)
#        KEEP=dir copies the callgrind dumps there (for callgrind_annotate)
#        CARGO_TARGET_DIR honoured
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/gateway/nginx-conf.sh
REQUESTS=${REQUESTS:-3000}
WARM_REQUESTS=${WARM_REQUESTS:-300}
CONC=${CONC:-8}
command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install valgrind)" >&2; exit 1; }
if [[ -n "${BIN_DIR:-}" ]]; then
  BIN=$BIN_DIR
else
  cargo build -q --profile release-lto -p ferry-gateway --example mock_engine --example gateway --example loadgen
  BIN=${CARGO_TARGET_DIR:-target}/release-lto/examples
fi
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 0.3
  rm -rf "$WORK"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
  for _ in $(seq 1 600); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "port $1 never opened" >&2; return 1
}
UP=$(free_port)
"$BIN/mock_engine" --listen 127.0.0.1:$UP --model mock --tokens 16 >"$WORK/mock.log" 2>&1 & PIDS+=($!)
wait_port $UP
measure() { # proxy, port, pid, kind, extra loadgen args...
  local proxy=$1 port=$2 pid=$3 kind=$4; shift 4
  "$BIN/loadgen" --url http://127.0.0.1:$port/v1/chat/completions --concurrency "$CONC" \
    --requests "$WARM_REQUESTS" --seconds 600 "$@" >/dev/null
  callgrind_control -z "$pid" >/dev/null 2>&1
  local out
  out=$("$BIN/loadgen" --url http://127.0.0.1:$port/v1/chat/completions --concurrency "$CONC" \
    --requests "$REQUESTS" --seconds 600 "$@")
  callgrind_control -d "$kind" "$pid" >/dev/null 2>&1
  sleep 0.5
  local f ir ok errors
  f=$(ls -t "$WORK"/cg.$pid.* | head -1)
  ir=$(awk '/^(summary|totals):/ {print $2; exit}' "$f")
  ok=$(sed -E 's/.*"ok":([0-9]+).*/\1/' <<<"$out")
  errors=$(sed -E 's/.*"errors":([0-9]+).*/\1/' <<<"$out")
  if [[ -n "${KEEP:-}" ]]; then mkdir -p "$KEEP" && cp "$f" "$KEEP/callgrind.$proxy.$kind"; fi
  echo "$proxy $kind Ir/request $(( ir / ok )) (Ir $ir, requests $ok, errors $errors)" | tee -a "$WORK/results"
}
stop() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }
for proxy in ${PROXIES:-ferry nginx}; do
  PORT=$(free_port)
  case $proxy in
    ferry)
      valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.%p" --dump-instr=no \
        "$BIN/gateway" --listen 127.0.0.1:$PORT --workers 1 --backend mock=http://127.0.0.1:$UP \
        >"$WORK/gw.log" 2>&1 & VG=$!; PIDS+=($VG)
      ;;
    nginx)
      NGINX_BIN=${NGINX_BIN:-$(command -v nginx || echo /usr/sbin/nginx)}
      if [[ ! -x "$NGINX_BIN" ]]; then echo "nginx not found (set NGINX_BIN): skipped" >&2; continue; fi
      nginx_conf "$WORK" "$PORT" "$UP" "worker_processes 1;
master_process off;
daemon off;"
      valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.%p" --dump-instr=no \
        "$NGINX_BIN" -p "$WORK/ngx" -e "$WORK/nginx-error.log" -c "$WORK/nginx.conf" \
        >"$WORK/nginx.log" 2>&1 & VG=$!; PIDS+=($VG)
      ;;
    *) echo "unknown proxy $proxy" >&2; exit 2 ;;
  esac
  wait_port $PORT
  measure "$proxy" "$PORT" "$VG" plain
  measure "$proxy" "$PORT" "$VG" stream --stream
  stop "$VG"
done
awk '{ir[$1" "$2]=$4} END {
  for (k in ir) split(k, a, " ");
  if (("ferry plain" in ir) && ("nginx plain" in ir))
    printf "ferry/nginx Ir/request: plain %.2fx, stream %.2fx\n", ir["ferry plain"]/ir["nginx plain"], ir["ferry stream"]/ir["nginx stream"]
}' "$WORK/results"
