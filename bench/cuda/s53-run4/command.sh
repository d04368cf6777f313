#!/bin/bash
# Session 53, call 4 (not run; for an H200): s53-run1's card without the kernel tests and the 0.8B, from pack s53a
# (the build of 27efed1, with its trace turbospark): device_env.sh's card (the 9B and 35B-A3B-8L decode in two
# rounds, cuda_bench's 9B, MTP 3 at forced acceptance on both), the 9B's engine graph traced, the 40-layer 35B-A3B.
# Prediction as in s53-run1: 9B ~570-575 tok/s (~60% of the probe), 35B-A3B-8L ~2,400-2,440.
PACK=.gpu/s53a/pack.tar.xz . bench/cuda/device_env.sh
card
TSC_TRACE_FILE=$O/te_9b_d.txt timeout 60 $B/turbospark_trace bench --backend cuda -m $S/9b --prompt 512 --gen 64 --runs 1 > $O/te_9b_d.log 2>&1; tl "engine trace 9b $?"
ls $O/te_*.txt > /dev/null 2>&1 && xz -T8 $O/te_*.txt
synth_shape 35b shapes/qwen3.5-35B-A3B.json
bj 35b_d_a X=0 $S/35b --prompt 512 --gen 128 --runs 2
device_end
