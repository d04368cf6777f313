#!/bin/bash
# session 35, device call 1 (the first start was refused, so two calls' work in one): session 34's unrun s34-run3
# (the attention's o_proj digits, TSC_ATTN_DIG=1: its byte-equality test's 12 cases, memcheck, racecheck) and the
# new fused one-row attention (TSC_ATTN_FUSE=1, attn.cu's k_attn_split_lk F: the prep launch's norms, RoPE and K/V
# append inside the split's blocks; cuda.attn_fused_prep_same_bits, 8 cases), then both A/B on every decode shape,
# and the GDN step's loads before its PDL wait (TSC_GDN_PRE=1, gdn.cu's k_gdn_fused P), the engine's GPU suite
# under all three, on whatever card comes (~290 s). Pack s35c (this commit's tree).
# Build: make -j2 BUILD=build-cuda CUDA=1 WERROR=-Werror all; bench/cuda/pack.sh s35c;
# bench/cuda/slim.sh out-all s35-run1; carry .gpu/s35c.
# Predictions: TSC_ATTN_DIG=1 (s34-run2, H100) 9B +0.3%, 0.8B +0.3%, 35B-A3B-8L +0.5%, default model +-0.
# TSC_ATTN_FUSE=1: the prep launch (~3.2 us span and a ~1 us hop, session 26's H200 trace) against ~0.5-1 us more in
# each split block (G + 1 double warp sums, two barriers, the angles in double): -2..-3 us an attention layer, so
# the 9B (8 attention layers, ~2.3 ms a step on an H100) +0.7..1.0%, the 0.8B (6 of 24, ~0.7 ms) +1.5..2.5%, the
# default model and 35B-A3B-8L (2 of 8) +0.5..1.5%. MTP 3 on the 9B: the drafts' attention is one row too (+~0.5%).
# TSC_GDN_PRE=1: the conv state, its taps and the state from DRAM no longer after the wait (~1-1.5 us where the
# in_proj rows from L2 take ~0.6): -0.3..-0.8 us a GDN layer, the 9B (24) +0.3..0.8%, the 0.8B (18) +0.8..2%.
PACK=.gpu/s35c/pack.tar.xz . bench/cuda/device_env.sh
ALL="TSC_ATTN_DIG=1 TSC_ATTN_FUSE=1 TSC_GDN_PRE=1"
timeout 60 $B/ts_test cuda.attn_digits_same_as_staging cuda.gdn_digits_same_as_staging cuda.attn_fused_prep_same_bits > $O/t_first.log 2>&1; tl "digits + fused tests $?"
TSC_GDN_PRE=1 timeout 90 $B/ts_test cuda.gdn_step_parity_and_row_exact cuda.gdn_digits_same_as_staging cuda_engine.spec_rollback_device_state_bit_exact cuda_engine.spec_verify_graph_chain cuda_engine.ahead_exact > $O/t_pre.log 2>&1; tl "GDN tests under TSC_GDN_PRE=1 $?"
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 3 $B/ts_test cuda.attn_digits_same_as_staging cuda.attn_fused_prep_same_bits > $O/memcheck.log 2>&1; tl "memcheck $?"
timeout 90 compute-sanitizer --tool racecheck --error-exitcode 3 $B/ts_test cuda.attn_digits_same_as_staging cuda.attn_fused_prep_same_bits > $O/racecheck.log 2>&1; tl "racecheck $?"
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
synth_shape 08b shapes/qwen3.5-0.8B.json
for r in a b c; do
  for v in d ad af gp all; do
    case $v in d) ev=X=0 ;; ad) ev=TSC_ATTN_DIG=1 ;; af) ev=TSC_ATTN_FUSE=1 ;; gp) ev=TSC_GDN_PRE=1 ;; all) ev=$ALL ;; esac
    bj 9b_${v}_$r "$ev" $S/9b --prompt 512 --gen 128 --runs 2
    bj 08b_${v}_$r "$ev" $S/08b --prompt 512 --gen 128 --runs 2
    bj def_${v}_$r "$ev" models/default --prompt 512 --gen 128 --runs 2
    bj 35b8_${v}_$r "$ev" $S/35b8 --prompt 512 --gen 128 --runs 2
  done
done
for r in a b; do
  for v in d all; do
    case $v in d) ev=X=0 ;; all) ev=$ALL ;; esac
    bj 9b_mtp3_${v}_$r "$ev" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
    bj def_mtp2_${v}_$r "$ev" models/default --prompt 512 --gen 256 --runs 2 --spec mtp --draft 2
  done
done
env $ALL timeout 150 $B/ts_test cuda_engine > $O/t_engine_all.log 2>&1; tl "ts_test cuda_engine under all three $?"
for v in d all; do
  case $v in d) ev=X=0 ;; all) ev=$ALL ;; esac
  env $ev timeout 30 $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b_$v.txt 2>&1; tl "cb 9b $v $?"
done
device_end
