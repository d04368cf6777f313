#!/bin/bash
# Session 51, call 1 (pack s51a: the build of dfac6ff, main's sources; turbospark and cuda_bench: make -j2
# BUILD=build-cuda CUDA=1 WERROR=-Werror all; PACK_MAIN="turbospark cuda_bench" bash bench/cuda/pack.sh s51a; the
# tree without its fixtures and bundled model, which nothing here reads). Asked for an H200: the acceptance card at
# the current defaults, last measured on an H200 in session 43 (before GUDIG, LIN_PRE, U). device_env.sh's card:
# the 9B and the 35B-A3B-8L decode, two rounds; cuda_bench's 9B step of 1..16 rows; MTP 3 at forced acceptance on
# both. Then the 40-layer 35B-A3B, one run.
PACK=.gpu/s51a/pack.tar.xz . bench/cuda/device_env.sh
card
synth_shape 35b shapes/qwen3.5-35B-A3B.json
VN=(d); VE=(X=0)
ab 35b $S/35b 1 --prompt 512 --gen 128 --runs 2
device_end
