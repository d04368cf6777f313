#!/bin/bash
# session 19, device call 6: the final defaults (the GDN step in one kernel for every row count, the attention
# split's lane-a-key scores) against the old forms (TSC_ATTN_KV=1 TSC_GDN_FUSED=0), interleaved, and the tests.
PACK=.gpu/s19f/pack.tar.xz . bench/cuda/device_env.sh
OLDF="TSC_ATTN_KV=1 TSC_GDN_FUSED=0"
timeout 150 $B/ts_test cuda > $O/kern.log 2>&1; tl "ts_test cuda $?"
cb() { local n=$1; shift; env "$@" $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_$n.txt 2>&1; tl "cb $n $?"; }
for r in 1 2; do cb new_$r X=1; cb old_$r $OLDF; done
cb 08_new X=1; cb 08_old $OLDF
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
G="--prompt 512 --gen 128 --runs 2"
for r in a b; do
  bj 9b_new_$r X=1 $S/9b $G
  bj 9b_old_$r "$OLDF" $S/9b $G
  bj 35b8_new_$r X=1 $S/35b8 $G
  bj 35b8_old_$r "$OLDF" $S/35b8 $G
  bj def_new_$r X=1 models/default $G
  bj def_old_$r "$OLDF" models/default $G
done
bj 9b_mtp3_new X=1 $S/9b $G --spec mtp --draft 3
bj 9b_mtp3_old "$OLDF" $S/9b $G --spec mtp --draft 3
bj def_mtp3_new X=1 models/default $G --spec mtp --draft 3
timeout 200 $B/ts_test cuda_engine > $O/eng.log 2>&1; tl "ts_test cuda_engine $?"
device_end
