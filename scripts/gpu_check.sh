#!/usr/bin/env bash
# gpu_check.sh: run a CUDA build's GPU tests and benchmarks, build nothing,
# and print one table (also written to $OUT/gpu_check.md, logs beside it).
#
#   scripts/gpu_check.sh [BUILD_DIR]          (default build-cuda; `make CUDA=1 BUILD=build-cuda`)
#   OUT=dir  SANITIZE=0 (skip compute-sanitizer)  QUICK=1 (short benchmark)
#   KERNELS=0 (skip the kernels' tests and cuda_bench)  ENGINE=0 (skip the engine's: group cuda_engine,
#   the CLI on --backend cuda (plain, --spec mtp and --spec dflash drafted = plain), bench --backend cuda
#   --json on the default model (plain, --spec mtp, --spec dflash) and the synth shapes)
#   SHAPES="qwen3.5-0.8B qwen3.5-9B" (the shapes/*.json benchmarked, INT4 g64 from `turbospark synth`;
#   a path to a shape file works too)  SYN=dir (where the installs go)  SYN_KEEP=0 (delete each after use)
#   BENCH_KERNELS=0 (skip cuda_bench: the Q4T tables and the dp4a ones, cuda_bench --mlx --digits 1|3)
#   SANITIZE_KERNELS=0 (no sanitizer on the kernels' group)
#   SAN_TIMEOUT_KERNELS=900, SAN_TIMEOUT=180 (seconds a sanitizer run may take, the kernels' and the engine's;
#   on an H100 the kernels' memcheck took ~90 s, their racecheck more than 7 min, the engine's racecheck 140 s;
#   SAN_TIMEOUT_TEST=120: the kernels' racecheck runs a test at a time, each under this limit;
#   a run cut by its limit is reported as CUT with how far it got, not as clean)
#
# Run from the repository root (the engine tests read models/default, tests/fixtures, README.md,
# shapes/). The CLI is BUILD_DIR/turbospark.
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
KERNELS=${KERNELS:-1}
ENGINE=${ENGINE:-1}
SHAPES=${SHAPES:-"qwen3.5-0.8B qwen3.5-9B"}
need="ts_test turbospark"; [ "$KERNELS" = 1 ] && [ "${BENCH_KERNELS:-1}" = 1 ] && need="$need cuda_bench"
for f in $need; do
  [ -x "$B/$f" ] || { echo "gpu_check: $B/$f missing: build with make CUDA=1 BUILD=$B first" >&2; exit 2; }
done
export TS_BIN="$B/turbospark"
TS="$B/turbospark"
SYN=${SYN:-/tmp/gpu_check_synth}
[ -d "$B/lib" ] && export LD_LIBRARY_PATH="$PWD/$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
status=0
cut=0 # a sanitizer run its time limit cut before its summary (reported, not a pass: the last line says so)
T="$OUT/gpu_check.md"
# san_row LABEL LOG RC: a compute-sanitizer run's row. Its summary when it has one (a nonzero count fails);
# when the time limit cut it first (racecheck over the kernels' list takes ~7 min on an H100, s47-run2), how
# far it got and whether it had reported anything by then (a report fails; none is "cut", not "clean").
# san_summary LOG: the run's summary line (none: cut before it); san_reports LOG: the errors and hazards it
# reported (of a cut run: those before the cut)
# spec_row SPEC FILE: a drafted bench's row (bench --spec SPEC, its JSON in $OUT/FILE: the last line, the run's
# summary); an unreadable one or drafted output not identical to plain greedy fails
spec_row() {
  python3 -c "import json,sys;j=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]);print('| bench default --spec %s | identical %s, mean accepted %.2f, spec %.1f tok/s against plain %.1f |'%(sys.argv[2],j['identical'],j['mean_accepted_length'],j['spec_tok_s'],j['plain_tok_s']))" "$OUT/$2" "$1" 2>/dev/null ||
    { echo "| bench --spec $1 | FAILED: its last JSON line unreadable ($2) |"; status=1; }
  grep -q '"identical": true' "$OUT/$2" || status=1
}
san_summary() { grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$1" | tail -1; }
san_reports() { grep -E '^========= ' "$1" | grep -cv 'COMPUTE-SANITIZER'; }
san_row() {
  local sum n e
  sum=$(san_summary "$2")
  if [ -n "$sum" ]; then
    echo "| $1 | rc $3 : $sum |"
    echo "$sum" | grep -Eq 'SUMMARY: 0 ' || status=1
  else
    n=$(grep -c '^\[ RUN' "$2"); e=$(san_reports "$2")
    echo "| $1 | CUT by its time limit (rc $3) in test $n of its list, before a summary; reports by then: $e |"
    [ "$e" = 0 ] || status=1
    cut=1
  fi
}
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
  # loaded at run time, not linked: cuBLAS for the prompt chunks' products and attention (src/cuda/blas.cu;
  # without it those fall back to our own kernels)
  blas=$(./"$B"/ts_test cuda.blas_prefill_products 2>&1 | grep -m1 -E 'cuBLAS' | sed 's/^ *//; s/^\[ SKIP \] [^:]*: //')
  echo "| loaded at run time | ${blas:-cuBLAS: no answer from the test} |"

  if [ "$KERNELS" = 1 ]; then
  ./"$B"/ts_test cuda >"$OUT/tests.log" 2>&1
  rc=$?
  res=$(tail -1 "$OUT/tests.log"); sk=$(grep -c '^\[ SKIP \]' "$OUT/tests.log")
  echo "| tests (group cuda) | $res, $sk skipped (rc $rc) |"
  [ "$rc" = 0 ] && [ "$sk" = 0 ] || status=1
  grep -E '^  (int|bf16|f16|f32|gdn|attn|block mask)' "$OUT/tests.log" | sed 's/^ */| parity | /; s/$/ |/'
  # the fused products again with every staging mode's digits made once (q4dp.cu, "Digits once"; by
  # default one-row normed and plain passes stage in every block)
  TSC_Q4DP_DIG=7 ./"$B"/ts_test cuda.fused_products_dp4a >"$OUT/tests_dig7.log" 2>&1
  rc=$?
  echo "| tests (fused products, TSC_Q4DP_DIG=7) | $(tail -1 "$OUT/tests_dig7.log") (rc $rc) |"
  [ "$rc" = 0 ] || status=1
  if [ "${SANITIZE_KERNELS:-$SANITIZE}" = 1 ] && command -v compute-sanitizer >/dev/null; then
    timeout ${SAN_TIMEOUT_KERNELS:-900} compute-sanitizer --tool memcheck --error-exitcode 9 ./"$B"/ts_test cuda >"$OUT/memcheck.log" 2>&1
    san_row "compute-sanitizer memcheck (all cuda tests)" "$OUT/memcheck.log" $?
    # racecheck a test at a time, each under its own limit (SAN_TIMEOUT_TEST, default 120 s): over the whole list
    # in one run it took more than 7 min on an H100 (s47-run2) and a cut run said nothing of the tests it had done
    clean=0; cutl=""; bad=""
    for t in cuda.gdn_step_parity_and_row_exact cuda.gdn_fused_same_bits cuda.gdn_nb2_same_bits \
      cuda.attn_short_parity_and_row_exact cuda.moe_route_exact cuda.argmax_exact cuda.norm_silu_parity \
      cuda.linear_parity_and_row_exact cuda.fused_products_q4t cuda.moe_linear_parity_and_row_exact \
      cuda.fused_products_dp4a cuda.topn_matches_cpu_op cuda.block_mask_attention_vs_cpu_backend \
      cuda.gdn_prefill_vs_step cuda.attn_same_pos_rows; do
      lg="$OUT/racecheck_${t#cuda.}.log"
      timeout ${SAN_TIMEOUT_TEST:-120} compute-sanitizer --tool racecheck --error-exitcode 9 ./"$B"/ts_test "$t" >"$lg" 2>&1
      sum=$(san_summary "$lg")
      if [ -z "$sum" ]; then
        cutl="$cutl ${t#cuda.}"; cut=1
        [ "$(san_reports "$lg")" = 0 ] || { bad="$bad ${t#cuda.}"; status=1; }
      elif echo "$sum" | grep -Eq 'SUMMARY: 0 ' && grep -q ' 0 failed' "$lg"; then clean=$((clean + 1))
      else bad="$bad ${t#cuda.}"; status=1; fi
    done
    echo "| compute-sanitizer racecheck, a test at a time | $clean clean (0 hazards, the test passed); CUT by the limit:${cutl:- none}; hazards or failures:${bad:- none} |"
  fi
  args=""; [ "$QUICK" = 1 ] && args="--quick"
  if [ "${BENCH_KERNELS:-1}" = 1 ]; then
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
  for n in 2 3 4 5 6 8 16; do r=$(kv rows_ratio.$n); [ -n "$r" ] && echo "| 9b fused step at $n rows (verify) | x$r of 1 row |"; done
  # the MLX layout the engine uploads: q4dp.cu's dp4a products at 8-bit x (the engine's default) and 24-bit
  for d in 1 3; do
    ./"$B"/cuda_bench $args --shape 9b --mlx --digits $d >"$OUT/bench_mlx_d$d.log" 2>&1 || { echo "| bench --mlx --digits $d | FAILED |"; status=1; continue; }
    kd() { awk -v k="$1" '$1 == "KV" && $2 == k {print $3}' "$OUT/bench_mlx_d$d.log"; }
    line=""; for p in 0 1 2 3 4 5 10; do line="$line${names[$p]} $(kd 9b.prod_pct.$p)%; "; done
    echo "| 9b dp4a products (MLX layout, $((8 * d))-bit x), 1 row, % of probe | $line |"
    echo "| 9b dp4a step, fused + PDL ($((8 * d))-bit x) | $(kd 9b.step_ms) ms = $(kd 9b.tok_s) tok/s = $(kd 9b.pct)% of probe, $(kd 9b.kernels) kernels; 4 rows x$(kd rows_ratio.4) |"
  done
  # the group numerics (TSC_Q4G=1: k_q4g one row, the tensor-core k_q4gm 2..16 rows; bench/cuda/RESULTS.md, session 23)
  if TSC_Q4G=1 ./"$B"/cuda_bench $args --shape 9b --mlx --digits 1 >"$OUT/bench_mlx_grp.log" 2>&1; then
    kq() { awk -v k="$1" '$1 == "KV" && $2 == k {print $3}' "$OUT/bench_mlx_grp.log"; }
    echo "| 9b group numerics (TSC_Q4G=1): step, fused + PDL | $(kq 9b.step_ms) ms = $(kq 9b.tok_s) tok/s; rows 2/4/8/16 x$(kq rows_ratio.2) / x$(kq rows_ratio.4) / x$(kq rows_ratio.8) / x$(kq rows_ratio.16); products at 1/4/16 rows $(kq prod_rows_ms.1) / $(kq prod_rows_ms.4) / $(kq prod_rows_ms.16) ms |"
  else echo "| bench TSC_Q4G=1 | FAILED |"; status=1; fi
  # the prompt chunks' tensor-core products (q4gemm.cu) on 512 rows: TFLOP/s and the speedup over 16-row passes
  if ./"$B"/cuda_bench --shape 9b --mlx --gemm 512 >"$OUT/bench_gemm512.log" 2>&1; then
    kg() { awk -v k="$1" '$1 == "KV" && $2 == k {print $3}' "$OUT/bench_gemm512.log"; }
    line=""; for p in 0 1 2 3 4 5; do line="$line${names[$p]} $(kg 9b.gemm_tflops.$p.512) TFLOP/s (x$(kg 9b.gemm_speedup.$p.512)); "; done
    echo "| 9b prompt-chunk products, 512 rows (tensor cores against 16-row passes) | $line |"
  else echo "| cuda_bench --gemm 512 | FAILED |"; status=1; fi
  fi
  fi

  if [ "$ENGINE" = 1 ]; then
  # ---- the engine on the GPU (src/cuda/backend.cu): parity, determinism, perplexity, plan, errors ----
  ./"$B"/ts_test cuda_engine >"$OUT/engine_tests.log" 2>&1
  rc=$?
  res=$(tail -1 "$OUT/engine_tests.log"); sk=$(grep -c '^\[ SKIP \]' "$OUT/engine_tests.log")
  echo "| engine tests (group cuda_engine) | $res, $sk skipped (rc $rc) |"
  [ "$rc" = 0 ] && [ "$sk" = 0 ] || status=1
  grep -E '^  (tiny|alt|default)' "$OUT/engine_tests.log" | sed 's/^ */| engine parity (model bits rows max-err max-logit top1) | /; s/$/ |/'
  grep -E '^  (sampled|default model|models/|/tmp|--device|no device|[0-9]+ installs|--spec dflash)' "$OUT/engine_tests.log" | sed 's/^ */| engine | /; s/$/ |/'
  # drafting exact with the opt-in group numerics too (a verify's rows then on the tensor-core k_q4gm)
  TSC_Q4G=1 ./"$B"/ts_test cuda_engine.spec_greedy_exact_fixtures cuda_engine.spec_greedy_exact_default_model \
    cuda_engine.dflash_greedy_exact_fixtures cuda_engine.spec_verify_graph_chain >"$OUT/engine_tests_grp.log" 2>&1
  rc=$?
  echo "| engine tests, drafting exact with TSC_Q4G=1 | $(tail -1 "$OUT/engine_tests_grp.log") (rc $rc) |"
  [ "$rc" = 0 ] || status=1
  # ---- the commands on --backend cuda ----
  L="$OUT/engine_cli.log"; : >"$L"
  cli() { # name, then the command
    local n=$1; shift
    echo "### $n: $*" >>"$L"
    if timeout 120 "$@" >>"$L" 2>&1; then echo "| cli: $n | ok |"; else echo "| cli: $n | FAILED (rc $?) |"; status=1; fi
  }
  cli run "$TS" run --backend cuda -m models/default -p "The quick brown fox" -n 24
  cli run-sampled "$TS" run --backend cuda -m models/default -p "Once upon a time" -n 24 --temp 0.8 --top-p 0.9 --seed 7
  echo "hello there" | cli chat "$TS" chat --backend cuda -m models/default -n 16
  printf '1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20\n' >"$OUT/ids.txt"
  cli perplexity "$TS" perplexity --backend cuda -m models/default -f "$OUT/ids.txt"
  cli logits "$TS" logits --backend cuda -m models/default --ids 1,2,3,4 -o "$OUT/logits.bin"
  "$TS" logits --backend cpu -m models/default --ids 1,2,3,4 -o "$OUT/logits_cpu.bin" >/dev/null 2>&1
  echo "| cli: logits cuda vs cpu, max abs diff | $(python3 -c "import array,sys;a=array.array('f',open('$OUT/logits.bin','rb').read());b=array.array('f',open('$OUT/logits_cpu.bin','rb').read());print(max(abs(x-y) for x,y in zip(a,b)) if len(a)==len(b) and a else 'size mismatch')" 2>&1) |"
  # MTP drafting on the GPU: drafted greedy output equals plain greedy
  plain=$("$TS" run --backend cuda -m models/default -p "The river" -n 64 --print-ids 2>>"$L")
  drafted=$("$TS" run --backend cuda --spec mtp --draft 3 -m models/default -p "The river" -n 64 --print-ids 2>"$OUT/spec_run.log")
  cat "$OUT/spec_run.log" >>"$L"
  if [ -n "$plain" ] && [ "$plain" = "$drafted" ]; then echo "| cli: --spec mtp --draft 3 on cuda, 64 tokens | identical to plain: $(grep -o 'mean accepted length [0-9.]*' "$OUT/spec_run.log") |"
  else echo "| cli: --spec mtp --draft 3 on cuda | FAILED or differs from plain greedy (spec_run.log) |"; status=1; fi
  # DFlash drafting on the GPU (the bundled drafter): drafted greedy output equals plain greedy
  if [ -f models/default/dflash/config.json ]; then
    for blk in 4 16; do
      drafted=$("$TS" run --backend cuda --spec dflash --block $blk -m models/default -p "The river" -n 64 --print-ids 2>"$OUT/dflash_run_b$blk.log")
      cat "$OUT/dflash_run_b$blk.log" >>"$L"
      if [ -n "$plain" ] && [ "$plain" = "$drafted" ]; then echo "| cli: --spec dflash --block $blk on cuda, 64 tokens | identical to plain: $(grep -o 'mean accepted length [0-9.]*' "$OUT/dflash_run_b$blk.log") |"
      else echo "| cli: --spec dflash --block $blk on cuda | FAILED or differs from plain greedy (dflash_run_b$blk.log) |"; status=1; fi
    done
  else echo "| cli: --spec dflash on cuda | FAILED: models/default/dflash missing |"; status=1; fi
  # sampling: the device's candidates against the row read back (TS_SAMPLE_TOPN=0): the same ids
  sa=$("$TS" run --backend cuda -m models/default -p "Once upon a time" -n 64 --temp 0.7 --top-k 40 --seed 3 --print-ids 2>"$OUT/samp1.log")
  sb=$(TS_SAMPLE_TOPN=0 "$TS" run --backend cuda -m models/default -p "Once upon a time" -n 64 --temp 0.7 --top-k 40 --seed 3 --print-ids 2>"$OUT/samp0.log")
  if [ -n "$sa" ] && [ "$sa" = "$sb" ]; then echo "| cli: sampled, device candidates vs the row read back | same 64 ids; decode $(grep -o 'decode [0-9.]* tok/s' "$OUT/samp1.log") vs $(grep -o 'decode [0-9.]* tok/s' "$OUT/samp0.log") |"
  else echo "| cli: sampled, device candidates vs the row read back | FAILED or the ids differ (samp1.log, samp0.log) |"; status=1; fi
  port=$((20000 + RANDOM % 20000))
  timeout 90 "$TS" serve --backend cuda -m models/default --port $port >"$OUT/serve.log" 2>&1 &
  spid=$!
  ok=0; out=""
  for i in $(seq 1 60); do
    sleep 0.5
    if command -v curl >/dev/null; then
      out=$(curl -s -m 20 http://127.0.0.1:$port/v1/completions -H 'Content-Type: application/json' \
            -d '{"prompt": "Hello", "max_tokens": 8}' 2>/dev/null)
    else
      out=$(python3 -c "import urllib.request as u;print(u.urlopen(u.Request('http://127.0.0.1:$port/v1/completions',data=b'{\"prompt\": \"Hello\", \"max_tokens\": 8}',headers={'Content-Type':'application/json'}),timeout=20).read().decode())" 2>/dev/null)
    fi
    echo "$out" | grep -q '"text"' && { ok=1; break; }
  done
  kill $spid 2>/dev/null; wait $spid 2>/dev/null
  echo "$out" >>"$L"
  if [ $ok = 1 ]; then echo "| cli: serve --backend cuda (one completion) | ok: $(echo "$out" | head -c 160) |"; else echo "| cli: serve (one completion) | FAILED: $(tail -2 "$OUT/serve.log" | tr '\n' ' ') |"; status=1; fi
  # ---- bench --backend cuda --json: the default model and the synth shapes (INT4 g64) ----
  mkdir -p "$SYN"
  bj() { # label, model dir
    "$TS" bench --backend cuda -m "$2" --prompt 512 --gen 128 --runs ${BENCH_RUNS:-3} --json >"$OUT/bench_$1.json" 2>>"$OUT/engine_bench.log" || {
      echo "| bench $1 | FAILED: $(tail -1 "$OUT/engine_bench.log") |"; status=1; return; }
    command -v python3 >/dev/null || { echo "| bench $1 | $(tr -d '\n' <"$OUT/bench_$1.json") |"; return; }
    python3 - "$OUT/bench_$1.json" "$1" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
print("| bench %s (512 + 128, %s) | decode %.1f tok/s, %.1f MB/token, %.0f GB/s = %.1f%% of the %.0f GB/s copy probe; prefill %.0f tok/s; %d kernels per decode graph, %.3f ms per token, %.1f us to launch a replay; device mem ours %.2f GB, driver+others %.2f GB |" % (
    sys.argv[2], j["backend"], j["decode_tok_s"], j["weight_bytes_per_token"] / 1e6, j["decode_gb_s"], j["pct_of_copy_probe"],
    j["copy_probe_gb_s"], j["prefill_tok_s"], j["graph_kernels"], j["ms_per_token"], j["graph_launch_us"],
    j["device_mem_ours"] / 1e9, j["device_mem_driver_and_others"] / 1e9))
PY
  }
  bj default models/default
  for M in 1 2 3 4; do
    "$TS" bench --backend cuda -m models/default --prompt 512 --gen 256 --runs 2 --spec mtp --draft $M --json >"$OUT/bench_spec_d$M.json" 2>>"$OUT/engine_bench.log" || { echo "| bench --spec mtp --draft $M | FAILED |"; status=1; continue; }
    spec_row "mtp --draft $M" bench_spec_d$M.json
  done
  # the speculative passes captured as graphs (the default) against run from the host (TSC_VGRAPH=0)
  for VG in 1 0; do
    TSC_VGRAPH=$VG "$TS" bench --backend cuda -m models/default --prompt 512 --gen 256 --runs 2 --spec mtp --draft 2 --json >"$OUT/bench_spec_vg$VG.json" 2>>"$OUT/engine_bench.log" || { echo "| bench --spec mtp --draft 2, TSC_VGRAPH=$VG | FAILED |"; status=1; continue; }
    python3 -c "import json,sys;j=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]);print('| bench default --spec mtp --draft 2, TSC_VGRAPH=%s | identical %s, spec %.1f tok/s against plain %.1f, %d graphs, %.2f replays per block |'%(sys.argv[2],j['identical'],j['spec_tok_s'],j['plain_tok_s'],j['graphs'],j['spec_graph_replays_per_block']))" "$OUT/bench_spec_vg$VG.json" $VG 2>/dev/null
    grep -q '"identical": true' "$OUT/bench_spec_vg$VG.json" || status=1
  done
  for blk in 4 8 16; do
    "$TS" bench --backend cuda -m models/default --prompt 512 --gen 256 --runs 2 --spec dflash --block $blk --json >"$OUT/bench_dflash_b$blk.json" 2>>"$OUT/engine_bench.log" || { echo "| bench --spec dflash --block $blk | FAILED |"; status=1; continue; }
    spec_row "dflash --block $blk" bench_dflash_b$blk.json
  done
  for sh in $SHAPES; do # a name under shapes/, or a path to a shape file
    f="shapes/$sh.json"; [ -f "$sh" ] && f=$sh && sh=$(basename "$sh" .json)
    d="$SYN/$sh-q4"
    [ -d "$d" ] || "$TS" synth --shape "$f" --out "$d" --bits 4 --quiet >>"$OUT/engine_bench.log" 2>&1
    bj "$sh" "$d"
    # prefill of a 2048-token prompt: the chunk kernels (tensor-core products, chunk attention and GDN, grouped MoE)
    if "$TS" bench --backend cuda -m "$d" --prompt 2048 --gen 16 --runs 2 --json >"$OUT/bench_${sh}_p2048.json" 2>>"$OUT/engine_bench.log"; then
      python3 -c "import json,sys;j=json.load(open(sys.argv[1]));print('| bench %s prefill 2048 | %.0f tok/s |'%(sys.argv[2],j['prefill_tok_s']))" \
        "$OUT/bench_${sh}_p2048.json" "$sh" 2>/dev/null
    else echo "| bench $sh prefill 2048 | FAILED |"; status=1; fi
    # the same on our own tensor-core products instead of cuBLAS (the default where libcublas is found)
    if TSC_BLAS=0 "$TS" bench --backend cuda -m "$d" --prompt 2048 --gen 16 --runs 2 --json >"$OUT/bench_${sh}_p2048_q4gemm.json" 2>>"$OUT/engine_bench.log"; then
      python3 -c "import json,sys;j=json.load(open(sys.argv[1]));print('| bench %s prefill 2048, TSC_BLAS=0 (q4gemm.cu) | %.0f tok/s |'%(sys.argv[2],j['prefill_tok_s']))" \
        "$OUT/bench_${sh}_p2048_q4gemm.json" "$sh" 2>/dev/null
    else echo "| bench $sh prefill 2048 TSC_BLAS=0 | FAILED |"; status=1; fi
    # MTP drafting at issue 17's forced acceptance (0.8 / 0.6 / 0.5 by position; bench --accept plants the
    # plain run's tokens as drafts after the drafter ran): tok/s at that acceptance, output checked identical
    if "$TS" bench --backend cuda -m "$d" --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5 \
        --json >"$OUT/bench_${sh}_accept.json" 2>>"$OUT/engine_bench.log"; then
      python3 -c "import json,sys;j=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]);print('| bench %s --spec mtp --draft 3 --accept 0.8,0.6,0.5 | identical %s, accepted by position %s, spec %.1f tok/s against plain %.1f (x%.2f), verify %.2f ms a block |'%(sys.argv[2],j['identical'],j['accept_by_position'],j['spec_tok_s'],j['plain_tok_s'],j['speedup'],j['ms_verify_per_block']))" \
        "$OUT/bench_${sh}_accept.json" "$sh" 2>/dev/null
      grep -q '"identical": true' "$OUT/bench_${sh}_accept.json" || status=1
    else echo "| bench $sh --accept | FAILED |"; status=1; fi
    # decode in run's and serve's default 4096-token context (the caches and the attention pieces a server has)
    if "$TS" bench --backend cuda -m "$d" --prompt 512 --gen 128 --runs 2 --ctx 4096 --json >"$OUT/bench_${sh}_ctx4096.json" 2>>"$OUT/engine_bench.log"; then
      python3 -c "import json,sys;j=json.load(open(sys.argv[1]));print('| bench %s in a 4096-token context (512 + 128) | decode %.1f tok/s |'%(sys.argv[2],j['decode_tok_s']))" \
        "$OUT/bench_${sh}_ctx4096.json" "$sh" 2>/dev/null
    else echo "| bench $sh --ctx 4096 | FAILED |"; status=1; fi
    [ "${SYN_KEEP:-1}" = 1 ] || rm -rf "$d"
  done
  if [ "$SANITIZE" = 1 ] && command -v compute-sanitizer >/dev/null; then
    TS_CUDA_ENGINE_QUICK=1 timeout ${SAN_TIMEOUT:-180} compute-sanitizer --tool memcheck --error-exitcode 9 ./"$B"/ts_test \
      cuda_engine.parity_every_fixture_and_the_default_model cuda_engine.plan_equals_device_allocations_and_close_returns_all \
      cuda.attn_device_pos_big_pieces cuda.gdn_fused_same_bits cuda.attn_pieces_by_row_length cuda.blas_prefill_products \
      cuda.linear_many_same_bits >"$OUT/engine_memcheck.log" 2>&1
    san_row "memcheck (engine parity, quick set; plan; attn device pos, pieces by row; gdn fused; cuBLAS and many-row products)" "$OUT/engine_memcheck.log" $?
    TS_CUDA_ENGINE_QUICK=1 timeout ${SAN_TIMEOUT:-180} compute-sanitizer --tool racecheck --error-exitcode 9 ./"$B"/ts_test \
      cuda_engine.parity_every_fixture_and_the_default_model cuda.attn_device_pos_big_pieces cuda.gdn_fused_same_bits \
      cuda.linear_many_same_bits >"$OUT/engine_racecheck.log" 2>&1
    san_row "racecheck (engine parity, quick set; attn device pos; gdn fused)" "$OUT/engine_racecheck.log" $?
    # the routed experts at the 35B-A3B's widths (the wide synthetic MoE alone: its shared-slot down)
    TS_CUDA_ENGINE_QUICK=3 timeout ${SAN_TIMEOUT:-180} compute-sanitizer --tool memcheck --error-exitcode 9 ./"$B"/ts_test \
      cuda_engine.parity_every_fixture_and_the_default_model >"$OUT/engine_memcheck_wide.log" 2>&1
    san_row "memcheck (engine parity, the wide synthetic MoE)" "$OUT/engine_memcheck_wide.log" $?
  fi
  fi
} >"$T"
cat "$T"
echo
echo "gpu_check: $([ $status = 0 ] && echo OK || echo FAILED)$([ $cut = 1 ] && echo ", a sanitizer run CUT by its time limit (its row)"); logs in $OUT (tests.log, bench.log, memcheck.log, racecheck_*.log, engine_*.log, bench_*.json)"
exit $status
