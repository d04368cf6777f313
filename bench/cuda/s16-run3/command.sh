#!/bin/bash
# session 16, device call 3: the defaults chosen from call 2 (digits once for
# SwiGLU passes and passes of several rows; 8 rows a pass for 8-bit x):
# cuda_bench 9b against the forced old staging (TSC_Q4DP_DIG=0 TSC_Q4DP_ROWS=4),
# the engine, the kernel and engine test groups, compute-sanitizer on the
# fused products with every mode's digits made once.
PACK=.gpu/s16c/pack.tar.xz . bench/cuda/device_env.sh
cb() { local n=$1; shift; env "$@" $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_$n.txt 2>&1; tl "cb $n $?"; }
for r in 1 2; do cb def_$r X=1; cb old_$r TSC_Q4DP_DIG=0 TSC_Q4DP_ROWS=4; done
$B/cuda_bench --shape 0.8b --mlx --digits 1 > $O/cb08.txt 2>&1; tl "cb 0.8b $?"
timeout 120 $B/ts_test cuda > $O/kern.log 2>&1; tl "ts_test cuda $?"
TSC_Q4DP_DIG=7 timeout 60 $B/ts_test cuda.fused_products_dp4a > $O/kern_d7_fused.log 2>&1; tl "fused d7 $?"
TSC_Q4DP_DIG=7 timeout 120 compute-sanitizer --tool memcheck $B/ts_test cuda.fused_products_dp4a > $O/memcheck_fused_d7.log 2>&1; tl "memcheck $?"
TSC_Q4DP_DIG=7 timeout 120 compute-sanitizer --tool racecheck $B/ts_test cuda.fused_products_dp4a > $O/racecheck_fused_d7.log 2>&1; tl "racecheck $?"
synth_shape 9b shapes/qwen3.5-9B.json
G="--prompt 512 --gen 128 --runs 2"
bj 9b X=1 $S/9b $G
bj 9b_old "TSC_Q4DP_DIG=0 TSC_Q4DP_ROWS=4" $S/9b $G
bj 9b_b X=1 $S/9b $G
bj 9b_mtp3 X=1 $S/9b $G --spec mtp --draft 3
bj 9b_mtp3_old "TSC_Q4DP_DIG=0 TSC_Q4DP_ROWS=4" $S/9b $G --spec mtp --draft 3
bj def X=1 models/default $G
timeout 150 $B/ts_test cuda_engine > $O/eng.log 2>&1; tl "ts_test cuda_engine $?"
device_end
