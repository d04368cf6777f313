#!/bin/bash
# session 43, device call 3 (pack s43d: the build of this commit's sources, bar this file): the MoE down's digits
# made once as the default (its 127 q4dp kernels are s43c's, which call 2 measured, byte for byte): the engine suite
# at the defaults, and the acceptance figures against TSC_MOE_DIG=0 in the same call.
PACK=.gpu/s43d/pack.tar.xz . bench/cuda/device_env.sh
timeout 150 $B/ts_test cuda_engine > $O/t_engine.log 2>&1; tl "cuda_engine $?"
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
synth_shape 9b shapes/qwen3.5-9B.json
VN=(d old); VE=(X=0 TSC_MOE_DIG=0)
ab 35b8 $S/35b8 2 --prompt 512 --gen 128 --runs 2
VN=(d); VE=(X=0)
ab 9b $S/9b 1 --prompt 512 --gen 128 --runs 2
ab 35b8_mtp3 $S/35b8 1 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
synth_shape 35b shapes/qwen3.5-35B-A3B.json
VN=(d old); VE=(X=0 TSC_MOE_DIG=0)
ab 35b $S/35b 1 --prompt 512 --gen 128 --runs 2
device_end
