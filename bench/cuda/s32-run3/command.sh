#!/bin/bash
# session 32, device call 3: the tree to merge (pack s32c: branch s32 with DX = 2 and the one-row plain passes' digits
# made once as the defaults, s32-run2's fastest forms) against the old defaults in the same binary
# (TSC_Q4DP_DX=0 TSC_Q4DP_P1=0: copied digits, plain one-row passes staged in their blocks) and against TS_AHEAD=0.
# make -j2 BUILD=build-cuda CUDA=1 WERROR=-Werror all, bench/cuda/pack.sh s32c. Carry .gpu/s32c
# (bench/cuda/slim.sh out-all s32-run3 first). Prediction: s32-run2's dx2d5 figures (9B ~521 tok/s, 0.8B ~1,457,
# default ~4,449, 35B-A3B-8L ~2,028) and MTP's verify unchanged (~3.14 ms a 9B block).
PACK=.gpu/s32c/pack.tar.xz . bench/cuda/device_env.sh
timeout 120 $B/ts_test cuda_engine.ahead_exact cuda_engine.determinism_same_prompt_and_seed > $O/t_ahead.log 2>&1; tl "ahead tests $?"
for f in 0 1; do TSC_Q4DP_DX=$f TSC_Q4DP_DIG=7 timeout 60 $B/ts_test cuda.fused_products_dp4a > $O/t_fused_dx${f}_d7.log 2>&1; tl "fused dx=$f dig7 $?"; done
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
synth_shape 08b shapes/qwen3.5-0.8B.json
for r in a b c; do
  for v in d old a0; do
    case $v in d) ev=X=0 ;; old) ev="TSC_Q4DP_DX=0 TSC_Q4DP_P1=0" ;; a0) ev=TS_AHEAD=0 ;; esac
    bj 9b_${v}_$r "$ev" $S/9b --prompt 512 --gen 128 --runs 2
    bj 08b_${v}_$r "$ev" $S/08b --prompt 512 --gen 128 --runs 2
    bj def_${v}_$r "$ev" models/default --prompt 512 --gen 128 --runs 2
    bj 35b8_${v}_$r "$ev" $S/35b8 --prompt 512 --gen 128 --runs 2
  done
done
for r in a b; do
  for v in d old; do
    case $v in d) ev=X=0 ;; old) ev="TSC_Q4DP_DX=0 TSC_Q4DP_P1=0" ;; esac
    env $ev timeout 60 $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b_${v}_$r.txt 2>&1; tl "cb 9b $v $?"
    bj 9b_mtp3_${v}_$r "$ev" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
    bj def_mtp2_${v}_$r "$ev" models/default --prompt 512 --gen 256 --runs 2 --spec mtp --draft 2
  done
  bj 35b8_mtp3_$r X=0 $S/35b8 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
done
timeout 200 $B/ts_test cuda > $O/t_cuda.log 2>&1; tl "ts_test cuda $?"
timeout 300 $B/ts_test cuda_engine > $O/t_engine.log 2>&1; tl "ts_test cuda_engine $?"
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 $B/ts_test cuda.fused_products_dp4a cuda_engine.ahead_exact > $O/memcheck.log 2>&1; tl "memcheck $?"
synth_shape 35b shapes/qwen3.5-35B-A3B.json
bj 35b_d X=0 $S/35b --prompt 512 --gen 128 --runs 2
device_end
