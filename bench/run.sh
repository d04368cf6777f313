#!/bin/sh
# bench/run.sh: the commands behind bench/RESULTS.md.
# Synthesises the shapes (random weights; speed does not depend on values) under
# $OUT (default /tmp/ts-bench, outside the repo: the 0.8B INT4 install is 0.44 GB),
# converts the tiny MoE fixture, and runs `turbospark bench` REPEAT times per model
# and thread count, interleaved, appending JSON lines to $OUT/results.jsonl.
# Check `uptime` first: the machine is shared and a busy second core halves
# everything. RESULTS.md reports medians over the repeats.
set -e
BIN=${BIN:-build/turbospark}
OUT=${OUT:-/tmp/ts-bench}
REPEAT=${REPEAT:-3}
mkdir -p "$OUT"
for s in 0.8B 2B 4B; do
  [ -d "$OUT/$s-int4" ] || $BIN synth --shape shapes/qwen3.5-$s.json --out "$OUT/$s-int4" --bits 4 --quiet
done
[ -d "$OUT/0.8B-int8" ] || $BIN synth --shape shapes/qwen3.5-0.8B.json --out "$OUT/0.8B-int8" --bits 8 --quiet
[ -d "$OUT/0.8B-bf16" ] || $BIN synth --shape shapes/qwen3.5-0.8B.json --out "$OUT/0.8B-bf16" --bits 16 --quiet
[ -d "$OUT/tiny-moe-int4" ] || $BIN convert tests/fixtures/tiny-moe "$OUT/tiny-moe-int4" --bits 4 --quiet
# KMODES: kernel modes (TS_KERNELS); avx512-q8 only changes 4-bit products
for r in $(seq "$REPEAT"); do
  for m in ${MODELS:-0.8B-int4 0.8B-int8 0.8B-bf16 2B-int4 4B-int4 tiny-moe-int4}; do
    for k in ${KMODES:-avx512 avx512-q8}; do
      case "$m:$k" in *int8:avx512-q8|*bf16:avx512-q8) continue;; esac
      for t in ${THREADS:-2 1}; do
        echo "== $m $k threads $t (load $(cut -d' ' -f1 /proc/loadavg))" >&2
        TS_KERNELS=$k $BIN bench -m "$OUT/$m" --threads "$t" --prompt 128 --gen 64 --runs 3 --json | tr -d '\n' >> "$OUT/results.jsonl"
        echo >> "$OUT/results.jsonl"
      done
    done
  done
done
