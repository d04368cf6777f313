#!/bin/bash
# Session 52, call 2: pack s52a again (the build of 66f2abd; see s52-run1's header). s52-run1 measured HS=2 a loss
# (35B-A3B-8L -2.2%, 40 layers -3.2%) and HS=1 +0.1% on the 35B-A3B-8L (three rounds, both orders). Is HS=1 a gain
# worth its kernels? More rounds on the 35B-A3B-8L (four, order alternating), the 40-layer shape (two rounds, both
# orders: s52-run1 had no HS=1 there), and MTP 3 at forced acceptance (the verify's several-token passes take HS
# too). Prediction: +0.1..0.2% on both shapes, or nothing; keep HS=1 as the default only if the 40-layer shape gains
# at least as much as the 8-layer one.
PACK=.gpu/s52a/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
for r in a b c d; do
  if [ $r = b ] || [ $r = d ]; then
    bj 35b8_hs1_$r TSC_MOE_HS=1 $S/35b8 --prompt 512 --gen 128 --runs 2; bj 35b8_d_$r X=0 $S/35b8 --prompt 512 --gen 128 --runs 2
  else
    bj 35b8_d_$r X=0 $S/35b8 --prompt 512 --gen 128 --runs 2; bj 35b8_hs1_$r TSC_MOE_HS=1 $S/35b8 --prompt 512 --gen 128 --runs 2
  fi
done
bj 35b8_mtp3_d_a X=0 $S/35b8 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
bj 35b8_mtp3_hs1_a TSC_MOE_HS=1 $S/35b8 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
synth_shape 35b shapes/qwen3.5-35B-A3B.json
bj 35b_d_a X=0 $S/35b --prompt 512 --gen 128 --runs 2
bj 35b_hs1_a TSC_MOE_HS=1 $S/35b --prompt 512 --gen 128 --runs 2
bj 35b_hs1_b TSC_MOE_HS=1 $S/35b --prompt 512 --gen 128 --runs 2
bj 35b_d_b X=0 $S/35b --prompt 512 --gen 128 --runs 2
device_end
