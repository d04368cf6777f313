#!/bin/bash
# session 38, device call 10 (pack s38g, as call 9: the final tree): the carveout default against TSC_CARVE=-1 once
# more on whatever card comes (the acceptance's is an H200; calls 7-9 ran on H100s), 9B and 35B-A3B-8L, two rounds.
PACK=.gpu/s38g/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
VN=(d old); VE=(X=0 TSC_CARVE=-1)
ab 9b $S/9b 2 --prompt 512 --gen 128 --runs 2
ab 35b8 $S/35b8 2 --prompt 512 --gen 128 --runs 2
device_end
