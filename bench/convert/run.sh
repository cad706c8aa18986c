#!/usr/bin/env bash
# Conversion benchmark (issue 5, bar 3): builds a synthetic >= 4 GB Megatron legacy checkpoint
# (TP=4, PP=2, bf16) with ferry-ckpt's own writer, then compares `ferry convert`'s engine
# (Megatron -> HF safetensors) against `cp -r` of the same bytes on the same disk, both
# followed by `sync`. Prints throughput ratio and peak RSS against the goal
# (<= 2 x largest merged tensor + 256 MiB). Cleans up after itself.
#
# usage: bench/convert/run.sh [WORKDIR] [LAYERS]   (default WORKDIR: a temp dir under /work or /tmp)
set -euo pipefail
cd "$(dirname "$0")/../.."
WORK="${1:-$(mktemp -d "${TMPDIR:-/tmp}/ferry-convert-bench.XXXXXX")}"
LAYERS="${2:-12}"
TARGET_DIR="${CARGO_TARGET_DIR:-target}"
trap 'rm -rf "$WORK/meg" "$WORK/meg_cp" "$WORK/hf"' EXIT
mkdir -p "$WORK"

cargo build -q --release -p ferry-ckpt --example convert_bench
BIN="$TARGET_DIR/release/examples/convert_bench"

echo "== generating synthetic checkpoint in $WORK/meg ($LAYERS layers, hidden 4096, ffn 11008, vocab 32000, TP=4 PP=2, bf16)"
"$BIN" gen "$WORK/meg" "$LAYERS"
SIZE=$(du -sb "$WORK/meg" | cut -f1)
echo "checkpoint bytes on disk: $SIZE"
sync

now() { date +%s.%N; }

cp_run() {
  rm -rf "$WORK/meg_cp"; sync
  local t0; t0=$(now)
  cp -r "$WORK/meg" "$WORK/meg_cp"; sync
  local t1; t1=$(now)
  echo "$t1 - $t0" | bc -l
}

conv_run() {
  rm -rf "$WORK/hf"; sync
  local t0; t0=$(now)
  local out; out=$("$BIN" convert "$WORK/meg" "$WORK/hf" "${WORKERS:-2}"); sync
  local t1; t1=$(now)
  echo "$out" >&2
  echo "$(echo "$t1 - $t0" | bc -l) $out"
}

CP1=$(cp_run)
read -r CONV1 REST1 <<<"$(conv_run 2>/dev/null)"
CP2=$(cp_run)
read -r CONV2 REST2 <<<"$(conv_run 2>/dev/null)"
CP=$(echo "($CP1 + $CP2) / 2" | bc -l)
CONV=$(echo "if ($CONV1 < $CONV2) $CONV1 else $CONV2" | bc -l)
CONVM=$(echo "($CONV1 + $CONV2) / 2" | bc -l)
PEAK=$(echo "$REST2" | sed -n 's/.*peak_rss=\([0-9]*\).*/\1/p')
LARGEST=$(echo "$REST2" | sed -n 's/.*largest_tensor=\([0-9]*\).*/\1/p')
OUT_BYTES=$(echo "$REST2" | sed -n 's/^bytes=\([0-9]*\).*/\1/p')
GOAL=$(( 2 * LARGEST + 256 * 1024 * 1024 ))
printf 'cp -r + sync:      %.2f s, %.2f s  (%.0f MB/s mean)\n' "$CP1" "$CP2" "$(echo "$SIZE / $CP / 1000000" | bc -l)"
printf 'convert + sync:    %.2f s, %.2f s  (%.0f MB/s mean, %s bytes of tensors written)\n' "$CONV1" "$CONV2" "$(echo "$SIZE / $CONVM / 1000000" | bc -l)" "$OUT_BYTES"
printf 'throughput ratio (convert / cp, same bytes, mean of 2): %.2fx   (goal >= 0.5x)\n' "$(echo "$CP / $CONVM" | bc -l)"
printf 'peak RSS: %.0f MiB; goal 2 x largest merged tensor (%.0f MiB) + 256 MiB = %.0f MiB -> %s\n' \
  "$(echo "$PEAK / 1048576" | bc -l)" "$(echo "$LARGEST / 1048576" | bc -l)" "$(echo "$GOAL / 1048576" | bc -l)" \
  "$([ "$PEAK" -le "$GOAL" ] && echo met || echo MISSED)"
