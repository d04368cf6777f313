#!/usr/bin/env bash
# gpu_check.sh: run a CUDA build's GPU tests and benchmarks, build nothing,
# and print one table (also written to $OUT/gpu_check.md, logs beside it).
#
#   scripts/gpu_check.sh [BUILD_DIR]          (default build-cuda; `make CUDA=1 BUILD=build-cuda`)
#   OUT=dir  SANITIZE=0 (skip compute-sanitizer)  QUICK=1 (short benchmark)
#
# What it needs on the GPU host: the NVIDIA driver (the CUDA runtime is linked
# statically) and the shared libraries listed under "links" below; a folder
# BUILD_DIR/lib, when present, is put first on LD_LIBRARY_PATH so those can be
# carried beside the binaries. It exits non-zero when a test fails or skips
# (a skip on a GPU host means the device was not usable), or the sanitizer
# reports an error.
set -uo pipefail
B=${1:-build-cuda}
OUT=${OUT:-$PWD/gpu-check-out}
SANITIZE=${SANITIZE:-1}
QUICK=${QUICK:-0}
mkdir -p "$OUT"
for f in ts_test cuda_bench; do
  [ -x "$B/$f" ] || { echo "gpu_check: $B/$f missing: build with make CUDA=1 BUILD=$B first" >&2; exit 2; }
done
[ -d "$B/lib" ] && export LD_LIBRARY_PATH="$PWD/$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
status=0
T="$OUT/gpu_check.md"
{
  echo "# gpu_check $(date -u +%FT%TZ)"
  echo
  echo "| item | result |"
  echo "|---|---|"
  echo "| build | $B ($(cat "$B/cuda.stamp" 2>/dev/null || echo '?')) |"
  echo "| device | $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1) |"
  # what the binaries link beyond the C library and the (static) CUDA runtime
  libs=$(ldd "$B/ts_test" "$B/cuda_bench" 2>/dev/null | awk '/=>/ {print $1 ($3 == "not" ? " (NOT FOUND)" : "")}' |
         grep -Ev '^(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+)\.so|^ld-linux' | sort -u | tr '\n' ' ')
  echo "| links (beyond libc, libstdc++, static cudart) | ${libs:-none} |"
  echo "$libs" | grep -q "NOT FOUND" && status=1

  ./"$B"/ts_test cuda >"$OUT/tests.log" 2>&1
  rc=$?
  res=$(tail -1 "$OUT/tests.log"); sk=$(grep -c '^\[ SKIP \]' "$OUT/tests.log")
  echo "| tests (group cuda) | $res, $sk skipped (rc $rc) |"
  [ "$rc" = 0 ] && [ "$sk" = 0 ] || status=1
  grep -E '^  (int|bf16|f16|f32|gdn|attn)' "$OUT/tests.log" | sed 's/^ */| parity | /; s/$/ |/'
  if [ "$SANITIZE" = 1 ] && command -v compute-sanitizer >/dev/null; then
    compute-sanitizer --tool memcheck --error-exitcode 9 ./"$B"/ts_test cuda >"$OUT/memcheck.log" 2>&1
    echo "| compute-sanitizer memcheck (all cuda tests) | rc $? : $(grep 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1) |"
    grep -q 'ERROR SUMMARY: 0 errors' "$OUT/memcheck.log" || status=1
    compute-sanitizer --tool racecheck --error-exitcode 9 ./"$B"/ts_test cuda.gdn_step_parity_and_row_exact \
      cuda.attn_short_parity_and_row_exact cuda.moe_route_exact cuda.argmax_exact cuda.norm_silu_parity \
      cuda.linear_parity_and_row_exact cuda.fused_products_q4t cuda.moe_linear_parity_and_row_exact \
      >"$OUT/racecheck.log" 2>&1
    echo "| compute-sanitizer racecheck (gdn, attn, moe, argmax, norm, products) | rc $? : $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/racecheck.log" | tail -1) |"
    grep -Eq '(RACECHECK|ERROR) SUMMARY: 0 ' "$OUT/racecheck.log" || status=1
  fi
  args=""; [ "$QUICK" = 1 ] && args="--quick"
  ./"$B"/cuda_bench $args >"$OUT/bench.log" 2>&1 || { echo "| bench | FAILED: $(tail -1 "$OUT/bench.log") |"; status=1; }
  kv() { awk -v k="$1" '$1 == "KV" && $2 == k {print $3}' "$OUT/bench.log"; }
  echo "| copy probe (2 GiB D2D, read+write) | $(kv probe_gbs) GB/s |"
  names=("gdn in_proj qkv+z+b+a" "gdn out_proj" "attn q+k+v" "attn o_proj" "ffn gate+up" "ffn down"
         "moe router+shared gate/up+gate" "moe experts gate+up (top k)" "moe experts down (top k)" "moe shared down" "head")
  for sh in 9b 35b8 0.8b; do
    [ -n "$(kv $sh.step_ms)" ] || continue
    for p in 0 1 2 3 4 5 6 7 8 9 10; do
      v=$(kv $sh.prod_pct.$p); [ -n "$v" ] && echo "| $sh ${names[$p]}, 1 row | $v% of probe |"
    done
    vs=$(kv $sh.vs_llama); vs=${vs:+, x$vs llama.cpp}
    echo "| $sh decode step, one graph, fused + PDL | $(kv $sh.step_ms) ms = $(kv $sh.tok_s) tok/s = $(kv $sh.pct)% of probe$vs; $(kv $sh.kernels) kernels (plain: $(kv $sh.plain_ms) ms) |"
  done
  for n in 2 4 8 16; do r=$(kv rows_ratio.$n); [ -n "$r" ] && echo "| 9b fused step at $n rows (verify) | x$r of 1 row |"; done
} >"$T"
cat "$T"
echo
echo "gpu_check: $([ $status = 0 ] && echo OK || echo FAILED); logs in $OUT (tests.log, bench.log, memcheck.log, racecheck.log)"
exit $status
