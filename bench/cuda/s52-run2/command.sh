#!/bin/bash
# Session 52, call 2 (never started: every try refused): the acceptance card's decode figures at the current
# defaults, for an H200 (unmeasured there since session 43). Pack s52a (the build of 66f2abd) or a build of HEAD
# serve alike: HEAD removed HS, an opt-in switch, and the default path's machine code is the same in both
# (text_cmp). Build and pack as s52-run1's header says, then carry .gpu/PACK and set PACK below.
PACK=.gpu/s52a/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 9b shapes/qwen3.5-9B.json
bj 9b_d_a X=0 $S/9b --prompt 512 --gen 128 --runs 2
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
bj 35b8_d_a X=0 $S/35b8 --prompt 512 --gen 128 --runs 2
bj 9b_d_b X=0 $S/9b --prompt 512 --gen 128 --runs 2
bj 35b8_d_b X=0 $S/35b8 --prompt 512 --gen 128 --runs 2
timeout 60 $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b.txt 2>&1; tl "cuda_bench 9b $?"
bj 9b_mtp3_d_a X=0 $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
bj 35b8_mtp3_d_a X=0 $S/35b8 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
synth_shape 35b shapes/qwen3.5-35B-A3B.json
bj 35b_d_a X=0 $S/35b --prompt 512 --gen 128 --runs 2
device_end
