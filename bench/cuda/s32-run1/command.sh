#!/bin/bash
# session 32, device call 1. Pack s32a: branch s32 at its first commit = main at 2ad9455 (session 31's last commit,
# whose CUDA edits -- the run-ahead graph keyed by its ids, two unreachable checks removed, the id-slot test on
# uintptr_t -- compiled but never ran) + k_q4dp's DX form (TSC_Q4DP_DX, off by default: with it off the kernels are
# 2ad9455's). make -j2 BUILD=build-cuda CUDA=1 WERROR=-Werror all, bench/cuda/pack.sh s32a.
# (1) the run-ahead GPU tests first; (2) the figures of record against TS_AHEAD=0 in one call (session 31's unrun
# call 6); (3) DX: a one-row product whose digits k_stage_digits made reads them in its loop from global memory (1) and
# loads its first weights before the PDL wait (2); with DIG=5 the plain passes' digits are made once too (out_proj,
# o_proj then take DX), DIG=7 the normed ones as well. Prediction (9B): DX=1 -0.5..-1 us a down (32 a step: +1-1.5%
# tok/s), DX=2 -1.5..-2 us a down (+2.5-3%); DIG=5 + DX=2 unknown (a launch ~1.8 us against 1.5 us of staging, less
# the first DRAM latency); DIG=7 a loss (one-row normed digits once cost 0.14 ms a step in session 16).
# (4) the GPU suites, DX's bits (fused products under DX=1/2 and DIG=7, engine parity/spec under DX=2), memcheck.
# Carry .gpu/s32a (bench/cuda/slim.sh out-all s32-run1 first).
PACK=.gpu/s32a/pack.tar.xz . bench/cuda/device_env.sh
timeout 120 $B/ts_test cuda_engine.ahead_exact cuda_engine.mtp_chain_same_drafts > $O/t_ahead.log 2>&1; tl "ahead tests $?"
for f in 1 2; do
  TSC_Q4DP_DX=$f timeout 60 $B/ts_test cuda.fused_products_dp4a > $O/t_fused_dx$f.log 2>&1; tl "fused dx=$f $?"
  TSC_Q4DP_DX=$f TSC_Q4DP_DIG=7 timeout 60 $B/ts_test cuda.fused_products_dp4a > $O/t_fused_dx${f}_d7.log 2>&1; tl "fused dx=$f dig7 $?"
done
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
synth_shape 08b shapes/qwen3.5-0.8B.json
for r in a b c; do
  bj 9b_d_$r X=0 $S/9b --prompt 512 --gen 128 --runs 2
  bj 9b_a0_$r TS_AHEAD=0 $S/9b --prompt 512 --gen 128 --runs 2
  bj 9b_dx1_$r TSC_Q4DP_DX=1 $S/9b --prompt 512 --gen 128 --runs 2
  bj 9b_dx2_$r TSC_Q4DP_DX=2 $S/9b --prompt 512 --gen 128 --runs 2
  bj 9b_dx2d5_$r "TSC_Q4DP_DX=2 TSC_Q4DP_DIG=5" $S/9b --prompt 512 --gen 128 --runs 2
  bj 35b8_d_$r X=0 $S/35b8 --prompt 512 --gen 128 --runs 2
  bj 35b8_a0_$r TS_AHEAD=0 $S/35b8 --prompt 512 --gen 128 --runs 2
  bj 08b_d_$r X=0 $S/08b --prompt 512 --gen 128 --runs 2
  bj 08b_a0_$r TS_AHEAD=0 $S/08b --prompt 512 --gen 128 --runs 2
  bj 08b_dx2_$r TSC_Q4DP_DX=2 $S/08b --prompt 512 --gen 128 --runs 2
  bj def_d_$r X=0 models/default --prompt 512 --gen 128 --runs 2
  bj def_a0_$r TS_AHEAD=0 models/default --prompt 512 --gen 128 --runs 2
  bj def_dx2_$r TSC_Q4DP_DX=2 models/default --prompt 512 --gen 128 --runs 2
done
for r in a b; do
  bj 9b_mtp3_d_$r X=0 $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
  bj 9b_mtp3_dx2_$r TSC_Q4DP_DX=2 $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
  bj 35b8_mtp3_$r X=0 $S/35b8 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
  bj def_mtp2_$r X=0 models/default --prompt 512 --gen 256 --runs 2 --spec mtp --draft 2
done
for r in a b; do
  for v in 0 1 2 2d5 2d7; do
    case $v in 2d5) ev="TSC_Q4DP_DX=2 TSC_Q4DP_DIG=5" ;; 2d7) ev="TSC_Q4DP_DX=2 TSC_Q4DP_DIG=7" ;; *) ev="TSC_Q4DP_DX=$v" ;; esac
    env $ev timeout 60 $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b_dx${v}_$r.txt 2>&1; tl "cb 9b dx=$v $?"
  done
done
timeout 200 $B/ts_test cuda > $O/t_cuda.log 2>&1; tl "ts_test cuda $?"
timeout 300 $B/ts_test cuda_engine > $O/t_engine.log 2>&1; tl "ts_test cuda_engine $?"
TSC_Q4DP_DX=2 timeout 200 $B/ts_test cuda_engine.parity_every_fixture_and_the_default_model cuda_engine.spec_rollback_device_state_bit_exact cuda_engine.ahead_exact cuda_engine.spec_greedy_exact_fixtures cuda_engine.spec_greedy_exact_default_model > $O/t_engine_dx2.log 2>&1; tl "engine dx=2 $?"
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 $B/ts_test cuda_engine.ahead_exact cuda_engine.mtp_chain_same_drafts > $O/memcheck.log 2>&1; tl "memcheck $?"
TSC_Q4DP_DX=2 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 3 $B/ts_test cuda.fused_products_dp4a > $O/memcheck_dx2.log 2>&1; tl "memcheck dx2 $?"
synth_shape 35b shapes/qwen3.5-35B-A3B.json
bj 35b_d X=0 $S/35b --prompt 512 --gen 128 --runs 2
bj 35b_a0 TS_AHEAD=0 $S/35b --prompt 512 --gen 128 --runs 2
device_end
