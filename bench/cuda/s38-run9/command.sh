#!/bin/bash
# session 38, device call 9 (pack s38g: the build of this commit): one shared-memory carveout (50%) on the decode
# path's kernels made the default (ctx.carve, tsc_blocks_per_sm_dec; TSC_CARVE=-1 the driver's choice), the prompt
# chunks' kernels left alone. Prediction (s38-run7/8): 9B and 35B-A3B-8L decode +1.8-2.0%, the 40-layer 35B-A3B
# about the same, prefill unchanged against TSC_CARVE=-1 (s38-run8's p50 cost the 9B's pp512 2.6% when the prompt
# kernels took it too). The engine suite at the new default.
PACK=.gpu/s38g/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
VN=(d old); VE=(X=0 TSC_CARVE=-1)
ab 9b $S/9b 2 --prompt 512 --gen 128 --runs 2
ab 35b8 $S/35b8 2 --prompt 512 --gen 128 --runs 2
bj 9b_mtp3_d_a X=0 $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
timeout 150 $B/ts_test cuda_engine > $O/t_engine.log 2>&1; tl "cuda_engine $?"
synth_shape 35b shapes/qwen3.5-35B-A3B.json
ab 35b $S/35b 1 --prompt 512 --gen 128 --runs 2
device_end
