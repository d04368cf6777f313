#!/bin/bash
# session 17, device call 1: one-row products through a deep cp.async ring (k_q4dp_as at NR = 1, S = 4 slots:
# 12.7 MB of weights issued before the PDL wait) and the kernels between products triggering their dependents
# before their own wait (TSC_PDL_EARLY), against the old forms (TSC_Q4DP_AS1=0, TSC_PDL_EARLY=0) in the same run;
# ring depth for rows (TSC_Q4DP_AS_S); tests on the new defaults; traces; per-kernel times of the gap kernels (ncu).
PACK=.gpu/s17a/pack.tar.xz . bench/cuda/device_env.sh
cb() { local n=$1; shift; env "$@" $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_$n.txt 2>&1; tl "cb $n $?"; }
for r in 1 2; do
  cb new_$r X=1
  cb old_$r TSC_Q4DP_AS1=0 TSC_PDL_EARLY=0
  cb ring_$r TSC_PDL_EARLY=0
  cb early_$r TSC_Q4DP_AS1=0
  cb s3_$r TSC_Q4DP_AS_S=3
  cb s2_$r TSC_Q4DP_AS_S=2
done
for v in "new X=1" "old TSC_Q4DP_AS1=0 TSC_PDL_EARLY=0"; do
  set -- $v; n=$1; shift
  env "$@" $B/cuda_bench_trace --shape 9b --mlx --digits 1 --trace $O/trace_$n.txt > $O/cbt_$n.txt 2>&1; tl "trace $n $?"
  xz -9 $O/trace_$n.txt
done
timeout 150 $B/ts_test cuda > $O/kern.log 2>&1; tl "ts_test cuda $?"
synth_shape 9b shapes/qwen3.5-9B.json
G="--prompt 512 --gen 128 --runs 2"
bj 9b X=1 $S/9b $G
bj 9b_old "TSC_Q4DP_AS1=0 TSC_PDL_EARLY=0" $S/9b $G
bj 9b_mtp3 X=1 $S/9b $G --spec mtp --draft 3
bj 9b_s3_mtp3 TSC_Q4DP_AS_S=3 $S/9b $G --spec mtp --draft 3
bj def X=1 models/default $G
bj def_old "TSC_Q4DP_AS1=0 TSC_PDL_EARLY=0" models/default $G
bj def_mtp3 X=1 models/default $G --spec mtp --draft 3
bj 9b_b X=1 $S/9b $G
bj 9b_old_b "TSC_Q4DP_AS1=0 TSC_PDL_EARLY=0" $S/9b $G
timeout 200 $B/ts_test cuda_engine > $O/eng.log 2>&1; tl "ts_test cuda_engine $?"
TS_GRAPHS=0 timeout 100 ncu --clock-control none -k regex:'k_attn|k_gdn|k_stage|k_q4dp' -c 40 --metrics gpu__time_duration.sum \
  $B/turbospark bench --backend cuda -m $S/9b --prompt 4 --gen 2 --runs 1 > $O/ncu.txt 2>&1; tl "ncu $?"
device_end
