#!/bin/bash
# session 21, device call 1: branch gpu-next2 validated and measured (its bench/cuda/next/command.sh, see there
# for the predictions: gdn-wy prompt GDN, gdn-defer, a verify's attention rows in one launch pair), main's build
# as *_ref for the A/Bs without a switch; then the engine's own decode graph traced kernel by kernel
# (turbospark_trace: a -DTSC_TRACE build, TSC_TRACE_FILE / TSC_TRACE_AT, backend.cu's trace_this_replay) on
# the 9B, the 35B-A3B-8L (where do its 650 us a token go: 101 kernels, 20% of the probe) and a 9B MTP verify.
# Before: make -j2 BUILD=build-cuda CUDA=1 all (branch), main into build-cuda-ref, the trace build into
# build-cuda-trace (turbospark, cuda_bench), bench/cuda/pack.sh s21a.
PACK=.gpu/s21a/pack.tar.xz . bench/cuda/device_env.sh
timeout 150 $B/ts_test cuda > $O/kern.log 2>&1; tl "ts_test cuda $?"
timeout 200 $B/ts_test cuda_engine > $O/eng.log 2>&1; tl "ts_test cuda_engine $?"
G3="cuda.gdn_prefill_vs_step cuda.gdn_fused_same_bits cuda.gdn_step_parity_and_row_exact cuda.attn_same_pos_rows cuda.block_mask_attention_vs_cpu_backend"
timeout 100 compute-sanitizer --tool memcheck $B/ts_test $G3 > $O/memcheck_gdn.log 2>&1; tl "memcheck $?"
timeout 80 compute-sanitizer --tool racecheck $B/ts_test $G3 > $O/racecheck_gdn.log 2>&1; tl "racecheck $?"
for r in 1 2; do
  $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_new_$r.txt 2>&1; tl "cb new $r $?"
  $B/cuda_bench_ref --shape 9b --mlx --digits 1 > $O/cb_ref_$r.txt 2>&1; tl "cb ref $r $?"
done
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
bref() { local n=$1 m=$2; shift 2; $B/turbospark_ref bench --backend cuda -m "$m" --json "$@" > "$O/e_$n.json" 2>>"$O/e_err.log"; tl "e_$n rc $?"; }
for r in a b; do
  for v in "wy X=1" "scan TSC_GDN_WY=0"; do
    set -- $v; n=$1; shift
    bj 9b_p512_${n}_$r "$*" $S/9b --prompt 512 --gen 16 --runs 2
    bj 9b_p2048_${n}_$r "$*" $S/9b --prompt 2048 --gen 16 --runs 2
    bj 35b8_p512_${n}_$r "$*" $S/35b8 --prompt 512 --gen 16 --runs 2
    bj 35b8_p2048_${n}_$r "$*" $S/35b8 --prompt 2048 --gen 16 --runs 2
  done
  bj 9b_mtp3_new_$r X=1 $S/9b --prompt 512 --gen 128 --runs 2 --spec mtp --draft 3
  bj 9b_mtp3_rows1_$r TSC_ATTN_ROWS=0 $S/9b --prompt 512 --gen 128 --runs 2 --spec mtp --draft 3
  bref 9b_mtp3_ref_$r $S/9b --prompt 512 --gen 128 --runs 2 --spec mtp --draft 3
  bj def_df16_new_$r X=1 models/default --prompt 512 --gen 256 --runs 2 --spec dflash --block 16
  bj def_df16_rows1_$r TSC_ATTN_ROWS=0 models/default --prompt 512 --gen 256 --runs 2 --spec dflash --block 16
  bref def_df16_ref_$r models/default --prompt 512 --gen 256 --runs 2 --spec dflash --block 16
done
bj 9b_p8192_wy X=1 $S/9b --prompt 8192 --gen 16 --runs 1
bj 9b_p8192_scan TSC_GDN_WY=0 $S/9b --prompt 8192 --gen 16 --runs 1
# the engine's graphs, kernel by kernel (one replay each)
tr() { local n=$1 at=$2 m=$3; shift 3; TSC_TRACE_FILE=$O/tr_$n.txt TSC_TRACE_AT=$at $B/turbospark_trace bench --backend cuda -m "$m" --json "$@" > $O/tr_$n.json 2>>$O/tr_err.log; tl "tr_$n $?"; [ -f $O/tr_$n.txt ] && xz -9 $O/tr_$n.txt; }
tr 9b 40 $S/9b --prompt 512 --gen 64 --runs 1
tr 35b8 40 $S/35b8 --prompt 512 --gen 64 --runs 1
tr 9b_mtp_a 30 $S/9b --prompt 512 --gen 64 --runs 1 --spec mtp --draft 3
tr 9b_mtp_b 31 $S/9b --prompt 512 --gen 64 --runs 1 --spec mtp --draft 3
device_end
