#!/bin/bash
# session 19, device call 7: the attention partials area, 1M floats (the default since this session) against the
# old 64K (TSC_ATT_SMALL=65536), in the engine at 512 and 4096 tokens and in serving contexts (bench --ctx):
# call 2 meant to measure it but ran a stale binary (its build had been cut short), so this is the first
# measurement of it. Binaries checked here before packing (bench --help lists --ctx; the switches are in it).
PACK=.gpu/s19g/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 9b shapes/qwen3.5-9B.json
OLD=TSC_ATT_SMALL=65536
for r in a b; do
  bj 9b_new_$r X=1 $S/9b --prompt 512 --gen 128 --runs 2
  bj 9b_old_$r $OLD $S/9b --prompt 512 --gen 128 --runs 2
done
for v in "new X=1" "old $OLD"; do
  set -- $v; n=$1; shift
  bj 9b_${n}_ctx4k "$*" $S/9b --prompt 512 --gen 128 --runs 2 --ctx 4096
  bj 9b_${n}_ctx32k "$*" $S/9b --prompt 512 --gen 128 --runs 1 --ctx 32768
  bj 9b_${n}_p4k "$*" $S/9b --prompt 4096 --gen 128 --runs 1
done
device_end
