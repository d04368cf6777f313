#!/bin/bash
# NOT RUN: session 34's device budget ran out (eight refused starts) before this call; a later session's first call.
# If the kernel test passes here (12 cases) with memcheck and racecheck clean, make TSC_ATTN_DIG=1 the default
# (ctx.cu's attn_dig; s34-run2 measured +0.3% 9B, +0.5% 35B-A3B-8L decode on an H100 and the engine's exactness
# tests 7/7 under it).
# Both digits tests share digits_taken_by_product since the review at the end of session 34 (compiled, not run on a
# GPU): the GDN one (cuda.gdn_digits_same_as_staging, run below too) must pass here as it did in s34-run1.
# session 34, device call 3 (pack s34c: s34b with cuda.attn_digits_same_as_staging's 3-row case at a device
# position: s34-run2's host position past the cache was refused by tsc_attn_decode's own check, a test bug, after
# the 1-row case had passed). Build: make -j2 BUILD=build-cuda CUDA=1 WERROR=-Werror all; bench/cuda/pack.sh s34c;
# bench/cuda/slim.sh out-all s34-run3; carry .gpu/s34c. The kernel test, memcheck and racecheck on it, then the 9B
# decode and MTP 3 with and without TSC_ATTN_DIG=1 again on whatever card comes.
PACK=.gpu/s34c/pack.tar.xz . bench/cuda/device_env.sh
timeout 60 $B/ts_test cuda.attn_digits_same_as_staging cuda.gdn_digits_same_as_staging > $O/t_first.log 2>&1; tl "digits tests $?"
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 3 $B/ts_test cuda.attn_digits_same_as_staging > $O/memcheck.log 2>&1; tl "memcheck $?"
timeout 90 compute-sanitizer --tool racecheck --error-exitcode 3 $B/ts_test cuda.attn_digits_same_as_staging > $O/racecheck.log 2>&1; tl "racecheck $?"
synth_shape 9b shapes/qwen3.5-9B.json
for r in a b; do
  for v in d ad; do
    case $v in d) ev=X=0 ;; ad) ev=TSC_ATTN_DIG=1 ;; esac
    bj 9b_${v}_$r "$ev" $S/9b --prompt 512 --gen 128 --runs 2
  done
done
for v in d ad; do
  case $v in d) ev=X=0 ;; ad) ev=TSC_ATTN_DIG=1 ;; esac
  bj 9b_mtp3_${v}_a "$ev" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
done
device_end
