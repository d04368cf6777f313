#!/bin/bash
# session 32, device call 2. Pack s32b: branch s32 = main at 2ad9455 + (1) the run-ahead fix: a replayed run-ahead
# graph's pass now hands the next step its own ticket's id slot (qwen35.c, ts_state.ahead_slot) -- call 1 found
# 2ad9455 broken on the GPU (cuda_engine 17/29: ahead_exact, determinism and every test comparing with plain greedy
# failed; its graph key's ids exposed a stale slot after each replay); (2) k_q4dp's DX form loading each round's digits
# with its weights (call 1's form read them in the arithmetic: the 9B step +16-27 us).
# make -j2 BUILD=build-cuda CUDA=1 WERROR=-Werror all, bench/cuda/pack.sh s32b. Carry .gpu/s32b
# (bench/cuda/slim.sh out-all s32-run2 first). Prediction: the GPU suites pass; DX=2 on the 9B -1..-1.5 us a down
# (+1.5-2.5% tok/s over d), DX=2 + DIG=5 +2-3%; the default model and 0.8B at least call 1's +1.9% / +3.7%.
PACK=.gpu/s32b/pack.tar.xz . bench/cuda/device_env.sh
timeout 120 $B/ts_test cuda_engine.ahead_exact cuda_engine.determinism_same_prompt_and_seed cuda_engine.mtp_chain_same_drafts > $O/t_ahead.log 2>&1; tl "ahead tests $?"
for f in 1 2; do
  TSC_Q4DP_DX=$f timeout 60 $B/ts_test cuda.fused_products_dp4a > $O/t_fused_dx$f.log 2>&1; tl "fused dx=$f $?"
  TSC_Q4DP_DX=$f TSC_Q4DP_DIG=7 timeout 60 $B/ts_test cuda.fused_products_dp4a > $O/t_fused_dx${f}_d7.log 2>&1; tl "fused dx=$f dig7 $?"
done
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
synth_shape 08b shapes/qwen3.5-0.8B.json
for r in a b c; do
  for v in d a0 dx2 dx2d5; do
    case $v in d) ev=X=0 ;; a0) ev=TS_AHEAD=0 ;; dx2) ev=TSC_Q4DP_DX=2 ;; dx2d5) ev="TSC_Q4DP_DX=2 TSC_Q4DP_DIG=5" ;; esac
    bj 9b_${v}_$r "$ev" $S/9b --prompt 512 --gen 128 --runs 2
    bj 08b_${v}_$r "$ev" $S/08b --prompt 512 --gen 128 --runs 2
    bj def_${v}_$r "$ev" models/default --prompt 512 --gen 128 --runs 2
    case $v in d|a0|dx2d5) bj 35b8_${v}_$r "$ev" $S/35b8 --prompt 512 --gen 128 --runs 2 ;; esac
  done
done
for r in a b; do
  for v in 0 1 2 2d5; do
    case $v in 2d5) ev="TSC_Q4DP_DX=2 TSC_Q4DP_DIG=5" ;; *) ev="TSC_Q4DP_DX=$v" ;; esac
    env $ev timeout 60 $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b_dx${v}_$r.txt 2>&1; tl "cb 9b dx=$v $?"
  done
done
for r in a b; do
  bj 9b_mtp3_d_$r X=0 $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
  bj 9b_mtp3_dx2d5_$r "TSC_Q4DP_DX=2 TSC_Q4DP_DIG=5" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
  bj 35b8_mtp3_$r X=0 $S/35b8 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
  bj def_mtp2_$r X=0 models/default --prompt 512 --gen 256 --runs 2 --spec mtp --draft 2
  bj def_mtp2_dx2d5_$r "TSC_Q4DP_DX=2 TSC_Q4DP_DIG=5" models/default --prompt 512 --gen 256 --runs 2 --spec mtp --draft 2
done
timeout 200 $B/ts_test cuda > $O/t_cuda.log 2>&1; tl "ts_test cuda $?"
timeout 300 $B/ts_test cuda_engine > $O/t_engine.log 2>&1; tl "ts_test cuda_engine $?"
TSC_Q4DP_DX=2 TSC_Q4DP_DIG=5 timeout 200 $B/ts_test cuda_engine.parity_every_fixture_and_the_default_model cuda_engine.spec_rollback_device_state_bit_exact cuda_engine.ahead_exact cuda_engine.spec_greedy_exact_fixtures cuda_engine.spec_greedy_exact_default_model cuda_engine.determinism_same_prompt_and_seed > $O/t_engine_dx2d5.log 2>&1; tl "engine dx2d5 $?"
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 $B/ts_test cuda_engine.ahead_exact cuda_engine.mtp_chain_same_drafts > $O/memcheck.log 2>&1; tl "memcheck $?"
TSC_Q4DP_DX=2 TSC_Q4DP_DIG=7 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 3 $B/ts_test cuda.fused_products_dp4a > $O/memcheck_dx2.log 2>&1; tl "memcheck dx2 $?"
synth_shape 35b shapes/qwen3.5-35B-A3B.json
bj 35b_d X=0 $S/35b --prompt 512 --gen 128 --runs 2
bj 35b_a0 TS_AHEAD=0 $S/35b --prompt 512 --gen 128 --runs 2
device_end
