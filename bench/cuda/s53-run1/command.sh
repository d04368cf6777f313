#!/bin/bash
# Session 53, call 1: the acceptance card's decode figures at the current defaults on an H200 (s52-run2's lines: that
# command never ran, and was removed), the kernel test group (its four older GDN tests now take gdn_in, 27efed1), and one engine
# trace of the 9B so that the H200's step can be read kernel by kernel (the last H200 trace is session 38's, before
# DIG, GUDIG, LIN_PRE and U). Pack s53a: the build of 27efed1 (make -j2 BUILD=build-cuda CUDA=1 WERROR=-Werror all;
# make -j2 BUILD=build-cuda-trace CUDA=1 EXTRA_NVCC_FLAGS=-DTSC_TRACE build-cuda-trace/turbospark; PACK_MAIN="turbospark
# ts_test cuda_bench" bash bench/cuda/pack.sh s53a); the tree without its fixtures and bundled model.
# Prediction (H200, from session 43's 568 tok/s, the H100's +0.7% since on the 9B and +0.6% on the 35B-A3B-8L, and
# DIG's 2,424 there): 9B ~570-575 tok/s (~60% of the probe), 35B-A3B-8L ~2,400-2,440 (3x llama.cpp is 2,546).
PACK=.gpu/s53a/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 9b shapes/qwen3.5-9B.json
bj 9b_d_a X=0 $S/9b --prompt 512 --gen 128 --runs 2
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
bj 35b8_d_a X=0 $S/35b8 --prompt 512 --gen 128 --runs 2
bj 9b_d_b X=0 $S/9b --prompt 512 --gen 128 --runs 2
bj 35b8_d_b X=0 $S/35b8 --prompt 512 --gen 128 --runs 2
timeout 60 $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b.txt 2>&1; tl "cuda_bench 9b $?"
bj 9b_mtp3_d_a X=0 $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
bj 35b8_mtp3_d_a X=0 $S/35b8 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
TSC_TRACE_FILE=$O/te_9b_d.txt timeout 60 $B/turbospark_trace bench --backend cuda -m $S/9b --prompt 512 --gen 64 --runs 1 > $O/te_9b_d.log 2>&1; tl "engine trace 9b $?"
ls $O/te_*.txt > /dev/null 2>&1 && xz -T8 $O/te_*.txt
timeout 150 $B/ts_test cuda > $O/t_cuda.log 2>&1; tl "ts_test cuda $?"
synth_shape 08b shapes/qwen3.5-0.8B.json
bj 08b_d_a X=0 $S/08b --prompt 512 --gen 128 --runs 2
synth_shape 35b shapes/qwen3.5-35B-A3B.json
bj 35b_d_a X=0 $S/35b --prompt 512 --gen 128 --runs 2
device_end
