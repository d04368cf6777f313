#!/bin/bash
# session 35, device call 1: session 34's unrun s34-run3 (the attention's o_proj digits, TSC_ATTN_DIG=1: its
# byte-equality test's 12 cases, memcheck and racecheck) with a pack of main at 127fd6b (s35a: the two digits tests
# sharing digits_taken_by_product), then the A/B on every decode shape, the engine's GPU suite under the switch,
# and the acceptance figures on whatever card comes. Build: make -j2 BUILD=build-cuda CUDA=1 WERROR=-Werror all;
# bench/cuda/pack.sh s35a; bench/cuda/slim.sh out-all s35-run1; carry .gpu/s35a.
# Predictions (s34-run2's, H100): TSC_ATTN_DIG=1 9B +0.3%, 0.8B +0.3%, 35B-A3B-8L +0.5%, default model +-0;
# on an H200 the same microseconds are a slightly larger share (9B ~+0.4%).
PACK=.gpu/s35a/pack.tar.xz . bench/cuda/device_env.sh
timeout 60 $B/ts_test cuda.attn_digits_same_as_staging cuda.gdn_digits_same_as_staging > $O/t_first.log 2>&1; tl "digits tests $?"
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 3 $B/ts_test cuda.attn_digits_same_as_staging > $O/memcheck.log 2>&1; tl "memcheck $?"
timeout 90 compute-sanitizer --tool racecheck --error-exitcode 3 $B/ts_test cuda.attn_digits_same_as_staging > $O/racecheck.log 2>&1; tl "racecheck $?"
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
synth_shape 08b shapes/qwen3.5-0.8B.json
for r in a b c; do
  for v in d ad; do
    case $v in d) ev=X=0 ;; ad) ev=TSC_ATTN_DIG=1 ;; esac
    bj 9b_${v}_$r "$ev" $S/9b --prompt 512 --gen 128 --runs 2
    bj 08b_${v}_$r "$ev" $S/08b --prompt 512 --gen 128 --runs 2
    bj def_${v}_$r "$ev" models/default --prompt 512 --gen 128 --runs 2
    bj 35b8_${v}_$r "$ev" $S/35b8 --prompt 512 --gen 128 --runs 2
  done
done
for r in a b; do
  for v in d ad; do
    case $v in d) ev=X=0 ;; ad) ev=TSC_ATTN_DIG=1 ;; esac
    bj 9b_mtp3_${v}_$r "$ev" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
    env $ev timeout 60 $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b_${v}_$r.txt 2>&1; tl "cb 9b $v $?"
  done
done
TSC_ATTN_DIG=1 timeout 200 $B/ts_test cuda_engine > $O/t_engine_ad.log 2>&1; tl "ts_test cuda_engine under TSC_ATTN_DIG=1 $?"
synth_shape 35b shapes/qwen3.5-35B-A3B.json
bj 35b_d X=0 $S/35b --prompt 512 --gen 128 --runs 2
bj 35b_ad TSC_ATTN_DIG=1 $S/35b --prompt 512 --gen 128 --runs 2
device_end
