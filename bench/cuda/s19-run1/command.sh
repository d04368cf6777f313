#!/bin/bash
# session 19, device call 1: weights brought into L2 ahead of the products (q4dp.cu l2_ahead, TSC_Q4DP_L2PF=KB a
# block, before each k_q4dp block's PDL wait; ahead_of_product, TSC_Q4DP_SDPF=MB a pass, from the staging kernel
# before its wait), against neither (the default), interleaved in one run; traces; the engine; the tests and
# memcheck with both on (the bits must not change).
PACK=.gpu/s19a/pack.tar.xz . bench/cuda/device_env.sh
cb() { local n=$1; shift; env "$@" $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_$n.txt 2>&1; tl "cb $n $?"; }
for r in 1 2 3; do
  cb def_$r X=1
  for k in 32 64 128 192; do cb pf${k}_$r TSC_Q4DP_L2PF=$k; done
  cb sd16_$r TSC_Q4DP_SDPF=16; cb sd32_$r TSC_Q4DP_SDPF=32
  cb pf64sd16_$r TSC_Q4DP_L2PF=64 TSC_Q4DP_SDPF=16
  cb pf128sd32_$r TSC_Q4DP_L2PF=128 TSC_Q4DP_SDPF=32
  cb pf128early_$r TSC_Q4DP_L2PF=128 TSC_PDL_EARLY=1
done
for v in "def X=1" "pf64 TSC_Q4DP_L2PF=64" "pf128 TSC_Q4DP_L2PF=128"; do
  set -- $v; n=$1; shift
  env "$@" $B/cuda_bench_trace --shape 9b --mlx --digits 1 --trace $O/trace_$n.txt > $O/cbt_$n.txt 2>&1; tl "trace $n $?"; xz -9 $O/trace_$n.txt
done
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
G="--prompt 512 --gen 128 --runs 2"
for r in a b; do
  bj 9b_$r X=1 $S/9b $G
  bj 9b_pf64_$r TSC_Q4DP_L2PF=64 $S/9b $G
  bj 9b_pf128_$r TSC_Q4DP_L2PF=128 $S/9b $G
  bj 9b_pf128sd32_$r "TSC_Q4DP_L2PF=128 TSC_Q4DP_SDPF=32" $S/9b $G
  bj 35b8_$r X=1 $S/35b8 $G
  bj 35b8_pf128_$r TSC_Q4DP_L2PF=128 $S/35b8 $G
done
bj 9b_mtp3 X=1 $S/9b $G --spec mtp --draft 3
bj 9b_mtp3_pf128sd32 "TSC_Q4DP_L2PF=128 TSC_Q4DP_SDPF=32" $S/9b $G --spec mtp --draft 3
bj def X=1 models/default $G
bj def_pf128 TSC_Q4DP_L2PF=128 models/default $G
export TSC_Q4DP_L2PF=128 TSC_Q4DP_SDPF=32
timeout 150 $B/ts_test cuda > $O/kern.log 2>&1; tl "ts_test cuda $?"
timeout 200 $B/ts_test cuda_engine > $O/eng.log 2>&1; tl "ts_test cuda_engine $?"
timeout 100 compute-sanitizer --tool memcheck $B/ts_test cuda.linear_parity_and_row_exact > $O/memcheck_linear.log 2>&1; tl "memcheck $?"
device_end
