#!/bin/bash
# session 17, device call 5 (commit 43ce111's build, the s17d pack): attention decode at longer contexts with the
# K/V sub-chunks through shared memory (default) and without (TSC_ATTN_KV=0); the split and combine kernels' own
# times under ncu (decode-phase launches only: the prompt takes k_attn_prefill).
PACK=.gpu/s17d/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 9b shapes/qwen3.5-9B.json
for p in 8192 16384; do
  bj 9b_${p} X=1 $S/9b --prompt $p --gen 64 --runs 1
  bj 9b_${p}_nokv TSC_ATTN_KV=0 $S/9b --prompt $p --gen 64 --runs 1
done
for v in "kv X=1" "nokv TSC_ATTN_KV=0"; do set -- $v; n=$1; shift
  for p in 512 4096; do
    env "$@" TS_GRAPHS=0 timeout 60 ncu --clock-control none -k regex:'k_attn_(split|combine)' -c 12 --metrics gpu__time_duration.sum \
      $B/turbospark bench --backend cuda -m $S/9b --prompt $p --gen 3 --runs 1 > $O/ncu_${n}_$p.txt 2>&1; tl "ncu $n $p $?"
  done
done
device_end
