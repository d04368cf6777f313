#!/bin/bash
# session 16, device call 2: x's digits made once a pass by k_stage_digits
# (q4dp.cu "Digits once"; TSC_Q4DP_DIG = the staging modes that take it: 1
# plain, 2 norm, 4 SwiGLU; the build's default 4) against every block making
# them (DIG=0): the 9B step and its rows (cuda_bench), traces, the engine;
# the kernel and engine test groups at the default and the fused group at DIG=7.
PACK=.gpu/s16b/pack.tar.xz . bench/cuda/device_env.sh
cb() { local n=$1; shift; env "$@" $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_$n.txt 2>&1; tl "cb $n $?"; }
for r in 1 2; do
  cb d0_$r TSC_Q4DP_DIG=0
  cb d4_$r TSC_Q4DP_DIG=4
  cb d6_$r TSC_Q4DP_DIG=6
  cb d7_$r TSC_Q4DP_DIG=7
  cb d4_pre_$r TSC_Q4DP_DIG=4 TSC_Q4DP_PRE=1
  cb d6_pre_$r TSC_Q4DP_DIG=6 TSC_Q4DP_PRE=1
  cb d6_r8_$r TSC_Q4DP_DIG=6 TSC_Q4DP_ROWS=8
done
for v in "d4 TSC_Q4DP_DIG=4" "d6 TSC_Q4DP_DIG=6" "d7 TSC_Q4DP_DIG=7"; do
  set -- $v; n=$1; shift
  env "$@" $B/cuda_bench_trace --shape 9b --mlx --digits 1 --trace $O/trace_$n.txt > $O/cbt_$n.txt 2>&1; tl "trace $n $?"
done
timeout 150 $B/ts_test cuda > $O/kern.log 2>&1; tl "ts_test cuda $?"
TSC_Q4DP_DIG=7 timeout 60 $B/ts_test cuda.fused_products_dp4a > $O/kern_d7_fused.log 2>&1; tl "ts_test fused d7 $?"
synth_shape 9b shapes/qwen3.5-9B.json
G="--prompt 512 --gen 128 --runs 2"
bj 9b_d0 TSC_Q4DP_DIG=0 $S/9b $G
bj 9b_d4 TSC_Q4DP_DIG=4 $S/9b $G
bj 9b_d6 TSC_Q4DP_DIG=6 $S/9b $G
bj 9b_d0b TSC_Q4DP_DIG=0 $S/9b $G
bj 9b_d4b TSC_Q4DP_DIG=4 $S/9b $G
bj 9b_d6b TSC_Q4DP_DIG=6 $S/9b $G
timeout 150 $B/ts_test cuda_engine > $O/eng.log 2>&1; tl "ts_test cuda_engine $?"
TSC_Q4DP_DIG=7 timeout 150 $B/ts_test cuda_engine > $O/eng_d7.log 2>&1; tl "ts_test cuda_engine d7 $?"
device_end
