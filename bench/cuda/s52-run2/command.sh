#!/bin/bash
# Session 52, call 2: pack s52a again (the build of 66f2abd; see s52-run1's header). s52-run1 (H100) measured HS=2 a
# loss (35B-A3B-8L -2.2%, 40 layers -3.2%) and HS=1 +0.1% on the 35B-A3B-8L. Asked of either card: on an H200 it
# gives the acceptance card's decode figures at the current defaults (unmeasured there since session 43); on either,
# whether HS=1's +0.1% holds: two more rounds on the 35B-A3B-8L (order alternating) and the 40-layer shape (both
# orders; s52-run1 had no HS=1 there). Prediction for HS=1: +0.1..0.2% on both shapes, or nothing.
PACK=.gpu/s52a/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 9b shapes/qwen3.5-9B.json
bj 9b_d_a X=0 $S/9b --prompt 512 --gen 128 --runs 2
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
bj 35b8_d_a X=0 $S/35b8 --prompt 512 --gen 128 --runs 2
bj 35b8_hs1_a TSC_MOE_HS=1 $S/35b8 --prompt 512 --gen 128 --runs 2
bj 35b8_hs1_b TSC_MOE_HS=1 $S/35b8 --prompt 512 --gen 128 --runs 2
bj 35b8_d_b X=0 $S/35b8 --prompt 512 --gen 128 --runs 2
bj 9b_d_b X=0 $S/9b --prompt 512 --gen 128 --runs 2
timeout 60 $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b.txt 2>&1; tl "cuda_bench 9b $?"
bj 9b_mtp3_d_a X=0 $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
bj 35b8_mtp3_d_a X=0 $S/35b8 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
synth_shape 35b shapes/qwen3.5-35B-A3B.json
bj 35b_d_a X=0 $S/35b --prompt 512 --gen 128 --runs 2
bj 35b_hs1_a TSC_MOE_HS=1 $S/35b --prompt 512 --gen 128 --runs 2
bj 35b_hs1_b TSC_MOE_HS=1 $S/35b --prompt 512 --gen 128 --runs 2
bj 35b_d_b X=0 $S/35b --prompt 512 --gen 128 --runs 2
device_end
