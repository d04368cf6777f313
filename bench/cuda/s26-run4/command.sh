#!/bin/bash
# session 26, device call 4 (pack s26b, the commit that made the form opt-in): k_stage_digits' XS form for norm
# passes (TSC_STAGE_XS=1: the several-row verify passes' normed staging without L2 reads in its loop; the default
# the form before, same binary). Prediction from the s26-run3 4-row trace: a normed stage 3.5-4.2 -> ~2.8 us, 64 a
# 9B verify pass: the 4-row step 2.96 -> ~2.90 ms (1.47 -> ~1.44x a step), the one-row step unchanged. Tests under
# it first (the fused products bit for bit against the unfused kernels at 3/5/16 rows; the row-exact products; the
# engine's verify passes against decode, parity), memcheck, then cuda_bench and the engine's MTP 3 at forced
# acceptance, interleaved. Make it the default if the tests pass and it wins. (~150 s)
PACK=.gpu/s26b/pack.tar.xz . bench/cuda/device_env.sh
TSC_STAGE_XS=1 timeout 60 $B/ts_test cuda.fused_products_dp4a cuda.linear_parity_and_row_exact > $O/t_cuda.log 2>&1; tl "ts_test cuda (xs) $?"
TSC_STAGE_XS=1 timeout 90 $B/ts_test cuda_engine.spec_greedy_exact_default_model cuda_engine.spec_graphs_exact_and_replayed cuda_engine.parity_every_fixture_and_the_default_model > $O/t_engine.log 2>&1; tl "ts_test cuda_engine (xs) $?"
CB="$B/cuda_bench --shape 9b --mlx --digits 1"
for r in a b; do
  TSC_STAGE_XS=1 $CB > $O/cb_xs_$r.txt 2>&1; tl "cb xs $?"
  $CB > $O/cb_old_$r.txt 2>&1; tl "cb old $?"
done
synth_shape 9b shapes/qwen3.5-9B.json
for r in a b; do
  bj 9b_mtp3_xs_$r "TSC_STAGE_XS=1" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
  bj 9b_mtp3_old_$r "X=1" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
done
TSC_STAGE_XS=1 timeout 40 compute-sanitizer --tool memcheck --error-exitcode 3 $B/ts_test cuda.fused_products_dp4a > $O/memcheck.log 2>&1; tl "memcheck $?"
device_end
