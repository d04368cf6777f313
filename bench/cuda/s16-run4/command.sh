#!/bin/bash
# session 16, device call 4: several-row passes through k_q4dp_as (the weights
# through a per-warp cp.async ring in shared memory, next step in flight while
# the current one computes) against k_q4dp (TSC_Q4DP_AS=0); tests; sanitizers.
PACK=.gpu/s16d/pack.tar.xz . bench/cuda/device_env.sh
cb() { local n=$1; shift; env "$@" $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_$n.txt 2>&1; tl "cb $n $?"; }
for r in 1 2; do cb as_$r X=1; cb noas_$r TSC_Q4DP_AS=0; done
timeout 150 $B/ts_test cuda > $O/kern.log 2>&1; tl "ts_test cuda $?"
timeout 100 compute-sanitizer --tool memcheck $B/ts_test cuda.linear_parity_and_row_exact > $O/memcheck_linear.log 2>&1; tl "memcheck $?"
timeout 100 compute-sanitizer --tool racecheck $B/ts_test cuda.linear_parity_and_row_exact > $O/racecheck_linear.log 2>&1; tl "racecheck $?"
synth_shape 9b shapes/qwen3.5-9B.json
G="--prompt 512 --gen 128 --runs 2"
bj 9b_mtp3 X=1 $S/9b $G --spec mtp --draft 3
bj 9b_mtp3_noas TSC_Q4DP_AS=0 $S/9b $G --spec mtp --draft 3
bj 9b_mtp1 X=1 $S/9b $G --spec mtp --draft 1
bj 9b_mtp7 X=1 $S/9b $G --spec mtp --draft 7
bj def_mtp3 X=1 models/default $G --spec mtp --draft 3
timeout 150 $B/ts_test cuda_engine > $O/eng.log 2>&1; tl "ts_test cuda_engine $?"
device_end
