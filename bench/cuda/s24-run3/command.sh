#!/bin/bash
# session 24, device call 3 (written while lending was paused), two opt-in forms with the same bits, one binary:
# (1) k_q4dp's XV form (TSC_Q4DP_XV=1): a one-row norm pass keeps x + add in shared memory from the sum of squares
# and stages from there, the norm weights copied before the PDL wait (one L2 round trip fewer on a staging chain of
# 3.3-3.7 us a normed launch in the s16/s19 traces; fused_products_dp4a's kind 4 compares it with the two unfused
# kernels bit for bit); (2) argmax in one launch (TSC_ARGMAX_ONE=1, the last block picks; argmax_exact runs both
# forms). Prediction: (1) the normed stage -0.5..-1 us a launch, 65 a 9B step: the step 2.02 -> ~1.96-1.99 ms;
# (2) -3..-5 us a step (the default model's ~290 us step: ~1.5%). Tests first, then the A/B, interleaved. (~300 s)
PACK=.gpu/s24d/pack.tar.xz . bench/cuda/device_env.sh
timeout 150 $B/ts_test cuda.fused_products_dp4a cuda.argmax_exact > $O/kern.log 2>&1; tl "ts_test fused products (kinds 3, 4), argmax (both forms) $?"
TSC_Q4DP_XV=1 TSC_ARGMAX_ONE=1 timeout 200 $B/ts_test cuda_engine.parity_every_fixture_and_the_default_model cuda_engine.spec_greedy_exact_default_model cuda_engine.spec_graphs_exact_and_replayed > $O/eng_xv.log 2>&1; tl "ts_test engine (xv, argmax one) $?"
CB="$B/cuda_bench --shape 9b --mlx --digits 1"
for r in a b; do
  $CB > $O/cb_def_$r.txt 2>&1; tl "cb def $?"
  TSC_Q4DP_XV=1 $CB > $O/cb_xv_$r.txt 2>&1; tl "cb xv $?"
done
synth_shape 9b shapes/qwen3.5-9B.json
for r in a b; do
  bj 9b_dec_def_$r "X=1" $S/9b --prompt 512 --gen 128 --runs 2
  bj 9b_dec_xv_$r "TSC_Q4DP_XV=1" $S/9b --prompt 512 --gen 128 --runs 2
  bj 9b_dec_xva_$r "TSC_Q4DP_XV=1 TSC_ARGMAX_ONE=1" $S/9b --prompt 512 --gen 128 --runs 2
  bj def_dec_def_$r "X=1" models/default --prompt 512 --gen 128 --runs 2
  bj def_dec_a_$r "TSC_ARGMAX_ONE=1" models/default --prompt 512 --gen 128 --runs 2
done
device_end
