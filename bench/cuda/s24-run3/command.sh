#!/bin/bash
# session 24, device call 3 (written while lending was paused): k_q4dp's XV form (TSC_Q4DP_XV=1): a one-row norm
# pass keeps x + add in shared memory from the sum of squares and stages from there (one L2 round trip fewer on the
# staging chain, 3.3-3.7 us a normed launch in the s16/s19 traces; the norm weights copied before the PDL wait; the
# same bits: fused_products_dp4a's kind 4
# compares it with the two unfused kernels bit for bit). Prediction: the normed stage
# -0.5..-1 us a launch, 65 a 9B step: the step 2.02 -> ~1.96-1.99 ms. Tests under it first (the fused and row-exact
# products compare fused with unfused bits; cuda_engine's parity and drafting), then the A/B, interleaved. (~250 s)
PACK=.gpu/s24d/pack.tar.xz . bench/cuda/device_env.sh
timeout 150 $B/ts_test cuda.fused_products_dp4a > $O/kern_xv.log 2>&1; tl "ts_test fused products (kinds 3, 4: 8-bit x without and with XV) $?"
TSC_Q4DP_XV=1 timeout 150 $B/ts_test cuda_engine.parity_every_fixture_and_the_default_model cuda_engine.spec_greedy_exact_default_model > $O/eng_xv.log 2>&1; tl "ts_test engine (xv) $?"
CB="$B/cuda_bench --shape 9b --mlx --digits 1"
for r in a b; do
  $CB > $O/cb_def_$r.txt 2>&1; tl "cb def $?"
  TSC_Q4DP_XV=1 $CB > $O/cb_xv_$r.txt 2>&1; tl "cb xv $?"
done
synth_shape 9b shapes/qwen3.5-9B.json
for r in a b; do
  bj 9b_dec_def_$r "X=1" $S/9b --prompt 512 --gen 128 --runs 2
  bj 9b_dec_xv_$r "TSC_Q4DP_XV=1" $S/9b --prompt 512 --gen 128 --runs 2
done
device_end
