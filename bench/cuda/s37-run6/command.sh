#!/bin/bash
# session 37, device call 6 (pack s37e: the build of e2571f4; the commits after it to 61dd60b change comments and
# one host line's layout only, q4dp.cu's device code text_cmp-identical): the final tree's MoE figures on whatever
# card comes (the acceptance's is an H200): 35B-A3B-8L and the whole 40-layer 35B-A3B, the short MoE layer against
# TSC_MOE_SHGU=0, interleaved; the 9B once. No new code: the measurement of record for the closing note.
PACK=.gpu/s37e/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
VN=(d old); VE=(X=0 TSC_MOE_SHGU=0)
ab 35b8 $S/35b8 2 --prompt 512 --gen 128 --runs 2
synth_shape 9b shapes/qwen3.5-9B.json
bj 9b_d_a X=0 $S/9b --prompt 512 --gen 128 --runs 2
synth_shape 35b shapes/qwen3.5-35B-A3B.json
ab 35b $S/35b 1 --prompt 512 --gen 128 --runs 2
device_end
