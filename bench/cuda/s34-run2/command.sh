#!/bin/bash
# session 34, device call 2 (pack s34b: main with the GDN rows by several warps the default, and the attention's
# combine making o_proj's digits, opt-in TSC_ATTN_DIG=1). The trace build's binaries did not fit beside the tree
# (a 36.6 MB pack against the 64 MiB a call carries), so no timeline here.
# Build: make -j2 BUILD=build-cuda CUDA=1 WERROR=-Werror all; bench/cuda/pack.sh s34b;
# bench/cuda/slim.sh out-all s34-run2; carry .gpu/s34b.
# Prediction for TSC_ATTN_DIG=1 (8 k_stage_digits launches fewer a 9B step and a verify pass, for a barrier and a
# few shuffles in the combine): 9B decode +0.3-0.6%, the 9B MTP 3 verify -10..-20 us a block; the 0.8B (6 attention
# layers of 24) +0.5-1%; 35B-A3B-8L (2 of 8) +0.3%. (Trimmed after six refused starts: the engine's exactness
# tests under the switch are a subset of cuda_engine, after the figures.)
PACK=.gpu/s34b/pack.tar.xz . bench/cuda/device_env.sh
timeout 120 $B/ts_test cuda.attn_digits_same_as_staging cuda.gdn_digits_same_as_staging cuda.attn_same_pos_rows cuda.attn_pieces_by_row_length > $O/t_first.log 2>&1; tl "first tests $?"
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
    [ $r = a ] && bj 35b8_mtp3_${v}_$r "$ev" $S/35b8 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
  done
done
TSC_ATTN_DIG=1 timeout 150 $B/ts_test cuda_engine.parity_every_fixture_and_the_default_model cuda_engine.ahead_exact cuda_engine.spec_greedy_exact_fixtures cuda_engine.spec_greedy_exact_default_model cuda_engine.spec_rollback_device_state_bit_exact cuda_engine.spec_verify_graph_chain cuda_engine.dflash_greedy_exact_fixtures > $O/t_engine_ad.log 2>&1; tl "cuda_engine subset under TSC_ATTN_DIG=1 $?"
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 3 $B/ts_test cuda.attn_digits_same_as_staging > $O/memcheck.log 2>&1; tl "memcheck $?"
timeout 100 compute-sanitizer --tool racecheck --error-exitcode 3 $B/ts_test cuda.attn_digits_same_as_staging > $O/racecheck.log 2>&1; tl "racecheck $?"
device_end
