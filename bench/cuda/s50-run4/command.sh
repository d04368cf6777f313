#!/bin/bash
# Session 50, call 4: call 3 again, on whichever card comes (an H200 would give the card its first figures at the
# current defaults). Pack s50d: the build of ede7184, main's sources: U the default, CD removed; turbospark and
# cuda_bench: make -j2 BUILD=build-cuda CUDA=1 WERROR=-Werror all; PACK_MAIN="turbospark cuda_bench" bash
# bench/cuda/pack.sh s50d; the tree without its fixtures and bundled model, which nothing here reads).
# The acceptance card at the current defaults (device_env.sh's card): the 9B and the 35B-A3B-8L decode, two rounds;
# cuda_bench's 9B step of 1 / 2 / 4 / 8 / 16 rows (issue 17's 4-row verify ratio, last measured in s47-run1 at
# 1.296x); MTP 3 at forced acceptance on both. Then the 40-layer 35B-A3B, one run, if the time allows.
PACK=.gpu/s50d/pack.tar.xz . bench/cuda/device_env.sh
card
synth_shape 35b shapes/qwen3.5-35B-A3B.json
VN=(d); VE=(X=0)
ab 35b $S/35b 1 --prompt 512 --gen 128 --runs 2
device_end
