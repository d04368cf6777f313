#!/bin/bash
# NOT RUN: session 35's device budget ran out (refused starts) before this call; the next session's first call
# (rebuild and repack at its HEAD: the pack s35e named below is ignored by git and may be gone by then).
# session 35, device call 3 (pack s35e: TSC_ATTN_DIG and TSC_GDN_PRE made the defaults after s35-run2, the fused
# attention removed): the kernel suite and the engine's GPU suite at the committed defaults, and one 9B decode
# figure. Build: make -j2 BUILD=build-cuda CUDA=1 WERROR=-Werror all; bench/cuda/pack.sh s35e;
# bench/cuda/slim.sh out-all s35-run3; carry .gpu/s35e. Prediction: 28/28 and 30/30 (as under the switches in
# s35-run2); the 9B as s35-run2's "new" column on the same card.
PACK=.gpu/s35e/pack.tar.xz . bench/cuda/device_env.sh
timeout 75 $B/ts_test cuda_engine > $O/t_engine.log 2>&1; tl "ts_test cuda_engine $?"
timeout 90 $B/ts_test cuda > $O/t_cuda.log 2>&1; tl "ts_test cuda $?"
synth_shape 9b shapes/qwen3.5-9B.json
bj 9b_d X=0 $S/9b --prompt 512 --gen 128 --runs 2
device_end
