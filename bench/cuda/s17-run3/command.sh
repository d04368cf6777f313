#!/bin/bash
# session 17, device call 3: the ring for the one-row plain passes only (out_proj, o_proj; the new default) against
# k_q4dp everywhere (TSC_Q4DP_AS1=0) and every one-row pass on the ring (TSC_Q4DP_AS1=2); a trace; the engine (9B,
# 35B-A3B-8L, default model); cuda_engine on the new default; per-kernel device times of the decode step's kernels
# between products (ncu, uncaptured, isolated: each kernel's own duration, not its place in the PDL chain).
PACK=.gpu/s17c/pack.tar.xz . bench/cuda/device_env.sh
cb() { local n=$1; shift; env "$@" $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_$n.txt 2>&1; tl "cb $n $?"; }
for r in 1 2 3; do cb def_$r X=1; cb as0_$r TSC_Q4DP_AS1=0; cb as2_$r TSC_Q4DP_AS1=2; done
$B/cuda_bench_trace --shape 9b --mlx --digits 1 --trace $O/trace_def.txt > $O/cbt_def.txt 2>&1; tl "trace def $?"; xz -9 $O/trace_def.txt
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
G="--prompt 512 --gen 128 --runs 2"
for r in a b; do
  bj 9b_$r X=1 $S/9b $G
  bj 9b_as0_$r TSC_Q4DP_AS1=0 $S/9b $G
  bj 35b8_$r X=1 $S/35b8 $G
  bj 35b8_as0_$r TSC_Q4DP_AS1=0 $S/35b8 $G
done
bj 9b_mtp3 X=1 $S/9b $G --spec mtp --draft 3
bj def X=1 models/default $G
bj def_mtp3 X=1 models/default $G --spec mtp --draft 3
timeout 200 $B/ts_test cuda_engine > $O/eng.log 2>&1; tl "ts_test cuda_engine $?"
TS_GRAPHS=0 timeout 120 ncu --clock-control none -k regex:'k_attn_(prep|split|combine)|k_gdn_(prep|scan)|k_stage_digits|k_q4dp' \
  --launch-skip 400 -c 60 --metrics gpu__time_duration.sum \
  $B/turbospark bench --backend cuda -m $S/9b --prompt 512 --gen 6 --runs 1 > $O/ncu.txt 2>&1; tl "ncu $?"
device_end
