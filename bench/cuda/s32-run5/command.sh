#!/bin/bash
# NOT RUN: session 32's device budget ran out (149 s left, no start allowed) before this call; a later session's first
# call. The merged tree's figures: the GDN digits for one-row passes only (s32-run4 measured decode with them on every
# row count, +0.3..+1.2%, and verify without them: TSC_GDN_DIG=0), DX = 2 and the one-row plain passes' digits made
# once (s32-run2/3), run-ahead fixed (s32-run2). Build: make -j2 BUILD=build-cuda CUDA=1 WERROR=-Werror all, then
# bench/cuda/pack.sh s32e (or a later name: change PACK below). Carry .gpu/s32e (bench/cuda/slim.sh out-all s32-run5
# first). Prediction: 9B MTP 3 verify at s32-run4's TSC_GDN_DIG=0 figure (~3.22 ms a block on an H100, ~3.14 on an
# H200), decode at s32-run4's default (H100 ~438 tok/s; H200 ~525-530); GPU suites all pass.
# Also two opt-in forms written after the budget ran out (compiled with -Werror, never run): TSC_GDN_ROWPAR=1 (the
# fused GDN kernel's rows' outputs and digits by warp t % 8, not warp 0 in turn: the same bits) and TSC_GDN_DIG=2 (the
# GDN step's digits for several rows too, which s32-run4 measured a 1.5% verify loss with the rows in turn).
# Prediction: ROWPAR alone -0.5..-1 us a verify's GDN layer (a 9B MTP 3 block -10..-25 us), nothing at one row;
# ROWPAR + DIG=2 a 9B block -30..-50 us against the default (24 out_proj digit launches gone).
# Session 33 (no device time: the same stop's budget) added cuda_engine.score_matches_feed_and_cpu (ts_session_score
# on the GPU: the feed's rows read back row by row) to the first tests; run on the CPU with a CPU engine in its place.
PACK=.gpu/s32e/pack.tar.xz . bench/cuda/device_env.sh
timeout 120 $B/ts_test cuda_engine.ahead_exact cuda_engine.spec_greedy_exact_default_model cuda_engine.spec_greedy_exact_fixtures cuda.gdn_digits_same_as_staging cuda_engine.score_matches_feed_and_cpu > $O/t_first.log 2>&1; tl "first tests $?"
TSC_GDN_ROWPAR=1 TSC_GDN_DIG=2 timeout 200 $B/ts_test cuda.gdn_digits_same_as_staging cuda.gdn_step_parity_and_row_exact cuda_engine.spec_greedy_exact_default_model cuda_engine.spec_greedy_exact_fixtures cuda_engine.spec_rollback_device_state_bit_exact cuda_engine.spec_verify_graph_chain > $O/t_rowpar.log 2>&1; tl "rowpar tests $?"
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
synth_shape 08b shapes/qwen3.5-0.8B.json
for r in a b c; do
  for v in d g0 old a0; do
    case $v in d) ev=X=0 ;; g0) ev=TSC_GDN_DIG=0 ;; old) ev="TSC_GDN_DIG=0 TSC_Q4DP_DX=0 TSC_Q4DP_P1=0" ;; a0) ev=TS_AHEAD=0 ;; esac
    bj 9b_${v}_$r "$ev" $S/9b --prompt 512 --gen 128 --runs 2
    bj 08b_${v}_$r "$ev" $S/08b --prompt 512 --gen 128 --runs 2
    bj def_${v}_$r "$ev" models/default --prompt 512 --gen 128 --runs 2
    bj 35b8_${v}_$r "$ev" $S/35b8 --prompt 512 --gen 128 --runs 2
  done
done
for r in a b; do
  for v in d g0 rp rpd2; do
    case $v in d) ev=X=0 ;; g0) ev=TSC_GDN_DIG=0 ;; rp) ev=TSC_GDN_ROWPAR=1 ;; rpd2) ev="TSC_GDN_ROWPAR=1 TSC_GDN_DIG=2" ;; esac
    bj 9b_mtp3_${v}_$r "$ev" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
    bj def_mtp2_${v}_$r "$ev" models/default --prompt 512 --gen 256 --runs 2 --spec mtp --draft 2
  done
  timeout 60 $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b_$r.txt 2>&1; tl "cb 9b $?"
done
timeout 200 $B/ts_test cuda > $O/t_cuda.log 2>&1; tl "ts_test cuda $?"
timeout 300 $B/ts_test cuda_engine > $O/t_engine.log 2>&1; tl "ts_test cuda_engine $?"
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 $B/ts_test cuda.gdn_digits_same_as_staging cuda_engine.ahead_exact > $O/memcheck.log 2>&1; tl "memcheck $?"
timeout 120 compute-sanitizer --tool racecheck --error-exitcode 3 $B/ts_test cuda.gdn_digits_same_as_staging > $O/racecheck.log 2>&1; tl "racecheck $?"
synth_shape 35b shapes/qwen3.5-35B-A3B.json
bj 35b_d X=0 $S/35b --prompt 512 --gen 128 --runs 2
device_end
