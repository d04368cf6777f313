#!/bin/bash
# session 17, device call 4: attention decode's keys and values through shared memory (k_attn_split<KV>: each
# sub-chunk's K/V rows loaded at once, then read from shared memory; the same bits) against the loads where used
# (TSC_ATTN_KV=0), one-row products back on k_q4dp (TSC_Q4DP_AS1=0 default). Tests (cuda: the two forms compared bit
# for bit; cuda_engine), cuda_bench, the engine at 512 and 4096 tokens of context, ncu of the split kernel.
PACK=.gpu/s17d/pack.tar.xz . bench/cuda/device_env.sh
cb() { local n=$1; shift; env "$@" $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_$n.txt 2>&1; tl "cb $n $?"; }
for r in 1 2 3; do cb kv_$r X=1; cb nokv_$r TSC_ATTN_KV=0; done
timeout 150 $B/ts_test cuda > $O/kern.log 2>&1; tl "ts_test cuda $?"
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
G="--prompt 512 --gen 128 --runs 2"
for r in a b; do
  bj 9b_$r X=1 $S/9b $G
  bj 9b_nokv_$r TSC_ATTN_KV=0 $S/9b $G
done
bj 9b_4k X=1 $S/9b --prompt 4096 --gen 128 --runs 1
bj 9b_4k_nokv TSC_ATTN_KV=0 $S/9b --prompt 4096 --gen 128 --runs 1
bj 35b8 X=1 $S/35b8 $G
bj 35b8_nokv TSC_ATTN_KV=0 $S/35b8 $G
bj 9b_mtp3 X=1 $S/9b $G --spec mtp --draft 3
bj 9b_mtp3_nokv TSC_ATTN_KV=0 $S/9b $G --spec mtp --draft 3
bj def X=1 models/default $G
bj def_mtp3 X=1 models/default $G --spec mtp --draft 3
timeout 200 $B/ts_test cuda_engine > $O/eng.log 2>&1; tl "ts_test cuda_engine $?"
timeout 60 compute-sanitizer --tool memcheck $B/ts_test cuda.attn_device_pos_big_pieces > $O/memcheck_attn.log 2>&1; tl "memcheck $?"
timeout 60 compute-sanitizer --tool racecheck $B/ts_test cuda.attn_device_pos_big_pieces > $O/racecheck_attn.log 2>&1; tl "racecheck $?"
for v in "kv X=1" "nokv TSC_ATTN_KV=0"; do set -- $v; n=$1; shift
  env "$@" TS_GRAPHS=0 timeout 60 ncu --clock-control none -k regex:'k_attn_(prep|split|combine)' --launch-skip 30 -c 9 --metrics gpu__time_duration.sum \
    $B/turbospark bench --backend cuda -m $S/9b --prompt 512 --gen 6 --runs 1 > $O/ncu_$n.txt 2>&1; tl "ncu $n $?"
done
device_end
