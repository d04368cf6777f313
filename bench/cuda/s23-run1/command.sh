#!/bin/bash
# session 23, device call 1: session 22's final tree (host-only changes since its call 5/6; never run) through the
# engine's tests, and where a 4-row verify's extra 0.93 ms goes on the 9B (cuda_bench's new products-by-rows table;
# the step by rows again with the mixers left out: CB_GDN=1 CB_ATTN=3), before writing a tensor-core verify for it.
PACK=.gpu/s23a/pack.tar.xz . bench/cuda/device_env.sh
timeout 150 $B/ts_test cuda_engine > $O/eng.log 2>&1; tl "ts_test cuda_engine $?"
$B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b.txt 2>&1; tl "cb 9b $?"
CB_GDN=1 CB_ATTN=3 $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b_nomix.txt 2>&1; tl "cb 9b nomix $?"
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
bj 35b8_dec "X=1" $S/35b8 --prompt 512 --gen 128 --runs 2
device_end
