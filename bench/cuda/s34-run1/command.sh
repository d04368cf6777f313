#!/bin/bash
# session 34, device call 1: session 32's s32-run5 call (never run: its budget ran out), unchanged but for the pack:
# s34a, main at b2e2aaa (sessions 32 and 33 merged: the GDN step's digits for one-row passes, DX = 2, the one-row
# plain passes' digits made once, run-ahead fixed, TSC_GDN_DIG read once into tsc_ctx.gdn_dig, ts_session_score).
# Build: make -j2 BUILD=build-cuda CUDA=1 WERROR=-Werror all; bench/cuda/pack.sh s34a; bench/cuda/slim.sh out-all
# s34-run1; carry .gpu/s34a. Predictions (s32-run5's): decode at s32-run4's default (H200 ~525-530 tok/s, H100
# ~438), 9B MTP 3 verify at s32-run4's TSC_GDN_DIG=0 figure (H200 ~3.14 ms a block, H100 ~3.22); GPU suites pass;
# TSC_GDN_ROWPAR=1 a 9B MTP 3 block -10..-25 us, with TSC_GDN_DIG=2 -30..-50 us against the default.
PACK=.gpu/s34a/pack.tar.xz . bench/cuda/device_env.sh
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
