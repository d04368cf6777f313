#!/bin/bash
# session 25, device call 2: the engine's A/B of s25-run1's forms (same pack), interleaved, two rounds: the 9B decode
# (default, TSC_Q4DP_SWD=1, TSC_Q4DP_XV=1, all three), the default model (default, SWD + one-launch argmax), the 9B's
# MTP 3 at forced acceptance 0.8/0.6/0.5 (its 4-row verify passes) with and without SWD. Predictions in s25-run1.
# Make default what passed s25-run1's tests and wins here; remove what loses. (~350 s)
PACK=.gpu/s25a/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 9b shapes/qwen3.5-9B.json
for r in a b; do
  bj 9b_dec_def_$r "X=1" $S/9b --prompt 512 --gen 128 --runs 2
  bj 9b_dec_swd_$r "TSC_Q4DP_SWD=1" $S/9b --prompt 512 --gen 128 --runs 2
  bj 9b_dec_xv_$r "TSC_Q4DP_XV=1" $S/9b --prompt 512 --gen 128 --runs 2
  bj 9b_dec_all_$r "TSC_Q4DP_SWD=1 TSC_Q4DP_XV=1 TSC_ARGMAX_ONE=1" $S/9b --prompt 512 --gen 128 --runs 2
  bj def_dec_def_$r "X=1" models/default --prompt 512 --gen 128 --runs 2
  bj def_dec_all_$r "TSC_Q4DP_SWD=1 TSC_ARGMAX_ONE=1" models/default --prompt 512 --gen 128 --runs 2
done
for v in def swd; do
  case $v in def) ev=X=1;; swd) ev=TSC_Q4DP_SWD=1;; esac
  bj 9b_mtp3_$v "$ev" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
done
device_end
