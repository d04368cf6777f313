#!/bin/bash
# session 17, device call 2: call 1's one-row ring lost (2.05 -> 2.54 ms) with long tails and block 0 waiting
# ~20 us for late blocks: the hypothesis is that a ring block (~101 KB of shared memory) cannot join an SM whose
# shared-memory split was set by a neighbour kernel until that SM drains. TSC_CARVE_ALL=100 gives every kernel the
# same (largest) split. A/B in one run: defaults (k_q4dp, no early trigger), carve alone, ring + carve (S = 4, 3),
# ring + carve + early trigger, early + carve; traces; the engine on the best forms; the verify at MTP 3.
PACK=.gpu/s17b/pack.tar.xz . bench/cuda/device_env.sh
cb() { local n=$1; shift; env "$@" $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_$n.txt 2>&1; tl "cb $n $?"; }
for r in 1 2; do
  cb def_$r X=1
  cb c100_$r TSC_CARVE_ALL=100
  cb ring_c100_$r TSC_Q4DP_AS1=1 TSC_CARVE_ALL=100
  cb ring3_c100_$r TSC_Q4DP_AS1=1 TSC_Q4DP_AS_S=3 TSC_CARVE_ALL=100
  cb ring_c100_early_$r TSC_Q4DP_AS1=1 TSC_CARVE_ALL=100 TSC_PDL_EARLY=1
  cb c100_early_$r TSC_CARVE_ALL=100 TSC_PDL_EARLY=1
  cb ring_$r TSC_Q4DP_AS1=1
done
for v in "ring_c100 TSC_Q4DP_AS1=1 TSC_CARVE_ALL=100" "c100 TSC_CARVE_ALL=100"; do
  set -- $v; n=$1; shift
  env "$@" $B/cuda_bench_trace --shape 9b --mlx --digits 1 --trace $O/trace_$n.txt > $O/cbt_$n.txt 2>&1; tl "trace $n $?"
  xz -9 $O/trace_$n.txt
done
synth_shape 9b shapes/qwen3.5-9B.json
G="--prompt 512 --gen 128 --runs 2"
bj 9b X=1 $S/9b $G
bj 9b_c100 TSC_CARVE_ALL=100 $S/9b $G
bj 9b_ring_c100 "TSC_Q4DP_AS1=1 TSC_CARVE_ALL=100" $S/9b $G
bj 9b_mtp3 X=1 $S/9b $G --spec mtp --draft 3
bj 9b_mtp3_c100 TSC_CARVE_ALL=100 $S/9b $G --spec mtp --draft 3
bj 9b_b X=1 $S/9b $G
bj 9b_c100_b TSC_CARVE_ALL=100 $S/9b $G
bj 9b_ring_c100_b "TSC_Q4DP_AS1=1 TSC_CARVE_ALL=100" $S/9b $G
device_end
