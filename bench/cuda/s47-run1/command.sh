#!/bin/bash
# session 47, device call 1 (pack s46a: PACK_MAIN="turbospark ts_test cuda_bench", the build of 8815baf, whose sources
# are this commit's). Ask for an H200 first: the acceptance card's figures at the current defaults (DIG, GUDIG,
# LIN_PRE), last measured on an H200 in session 43 before GUDIG and LIN_PRE. Since then, on H100s, GUDIG +2.0-2.1%,
# LIN_PRE +0.35%; on session 43's H200 baseline (2,424 with DIG) that predicts ~2,484 tok/s for the 35B-A3B-8L
# (2.93x llama.cpp's 848.6; 3x is 2,546), the 9B unchanged (~567, 60% of the probe; no MoE layer). The prediction is
# a product of H100 ratios, not an H200 measurement: this call is that measurement.
# 1. device_env.sh's card: 9B and 35B-A3B-8L decode, two rounds; cuda_bench's 9B (the step of 1 / 2 / 4 / 8 / 16
#    rows); MTP 3 at forced acceptance on both;
# 2. the engine group at the defaults (s45-run1 ran it on an H100: 32/32);
# 3. the 40-layer 35B-A3B (587.7 in session 43 on an H200 before GUDIG; ~18 GB synthesized, last for time).
PACK=.gpu/s46a/pack.tar.xz . bench/cuda/device_env.sh
card
timeout 150 $B/ts_test cuda_engine > $O/t_engine.log 2>&1; tl "cuda_engine $?"
VN=(d); VE=(X=0)
synth_shape 35b shapes/qwen3.5-35B-A3B.json
ab 35b $S/35b 1 --prompt 512 --gen 128 --runs 2
device_end
