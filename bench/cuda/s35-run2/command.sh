#!/bin/bash
# session 35, device call 2 (pack s35d): TSC_GDN_PRE=1 with its fix (no loads before the PDL wait right after
# another GDN launch: s35-run1 found a lazy rollback's pending-row launch followed by the pass's own, so the second
# read the state before the first wrote it: 1 of 5 GDN tests and 6 of 30 engine tests failed under it), the engine's
# GPU suite under the two proposed defaults (TSC_ATTN_DIG=1 TSC_GDN_PRE=1), their decode A/B, the 9B MTP 3 at forced
# acceptance (trimmed to ~150 s after a 211 s refusal: no ncu of the fused attention split, two rounds). Build: make -j2 BUILD=build-cuda CUDA=1 WERROR=-Werror all;
# bench/cuda/pack.sh s35d; bench/cuda/slim.sh out-all s35-run2; carry .gpu/s35d.
# Predictions: the tests pass; TSC_GDN_PRE=1 as s35-run1's decode (+0.3..0.8%: plain decode has no adjacent GDN
# launches, so the rule changes nothing there); MTP 3 output identical to plain.
PACK=.gpu/s35d/pack.tar.xz . bench/cuda/device_env.sh
NEW="TSC_ATTN_DIG=1 TSC_GDN_PRE=1"
TSC_GDN_PRE=1 timeout 90 $B/ts_test cuda.gdn_step_parity_and_row_exact cuda.gdn_digits_same_as_staging cuda_engine.spec_rollback_device_state_bit_exact cuda_engine.spec_verify_graph_chain cuda_engine.ahead_exact > $O/t_pre.log 2>&1; tl "GDN tests under TSC_GDN_PRE=1 $?"
env $NEW timeout 150 $B/ts_test cuda_engine > $O/t_engine_new.log 2>&1; tl "ts_test cuda_engine under $NEW $?"
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
synth_shape 08b shapes/qwen3.5-0.8B.json
for r in a b; do
  for v in d new; do
    case $v in d) ev=X=0 ;; new) ev=$NEW ;; esac
    bj 9b_${v}_$r "$ev" $S/9b --prompt 512 --gen 128 --runs 2
    bj 08b_${v}_$r "$ev" $S/08b --prompt 512 --gen 128 --runs 2
    bj def_${v}_$r "$ev" models/default --prompt 512 --gen 128 --runs 2
    bj 35b8_${v}_$r "$ev" $S/35b8 --prompt 512 --gen 128 --runs 2
  done
done
for r in a; do
  for v in d new; do
    case $v in d) ev=X=0 ;; new) ev=$NEW ;; esac
    bj 9b_mtp3_${v}_$r "$ev" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
  done
done
device_end
