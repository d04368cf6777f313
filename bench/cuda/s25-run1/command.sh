#!/bin/bash
# session 25, device call 1 (written while lending was paused; the first call of the next session that has a
# device): the opt-in forms of sessions 24-25 that keep the bits, one binary (.gpu/s25a, bench/cuda/pack.sh s25a):
# (1) TSC_Q4DP_SWD=1: a dense FFN's gate/up launch makes the down's digits (k_q4dp_sw), one launch and one grid
#     hand-off fewer a dense layer (decode and 2..8-row verify passes); prediction the 9B step 2.02 -> ~1.96-1.97
#     ms, the default model -12..-16 us, a 4-row verify -60..-90 us (cuda_bench's several-row steps; MTP 3 below);
# (2) TSC_Q4DP_XV=1: k_q4dp's one-row norm passes keep x + add in shared memory (s24-run3's); prediction the 9B step
#     2.02 -> ~1.96-1.99 ms; (3) TSC_ARGMAX_ONE=1: argmax in one launch, -3..-5 us a step.
# Tests first (bit for bit against the default forms: the kernels, then the engine with all three on), memcheck on
# the new kernel test, then cuda_bench interleaved, two rounds (its several-row steps are the verify's); the engine's
# A/B is s25-run2 (one call could not hold both). (~350 s)
PACK=.gpu/s25a/pack.tar.xz . bench/cuda/device_env.sh
timeout 150 $B/ts_test cuda.ffn_swd_same_bits cuda.fused_products_dp4a cuda.argmax_exact > $O/kern.log 2>&1; tl "ts_test kernels (swd, fused kinds 3/4, argmax both forms) $?"
timeout 120 $B/ts_test cuda_engine.ffn_swd_same_bits_fewer_launches > $O/eng_swd.log 2>&1; tl "ts_test engine swd $?"
TSC_Q4DP_SWD=1 TSC_Q4DP_XV=1 TSC_ARGMAX_ONE=1 timeout 200 $B/ts_test cuda_engine.parity_every_fixture_and_the_default_model cuda_engine.spec_greedy_exact_default_model cuda_engine.spec_graphs_exact_and_replayed > $O/eng_all.log 2>&1; tl "ts_test engine (swd, xv, argmax one) $?"
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 $B/ts_test cuda.ffn_swd_same_bits > $O/memcheck.log 2>&1; tl "memcheck swd $?"
CB="$B/cuda_bench --shape 9b --mlx --digits 1"
for r in a b; do
  $CB > $O/cb_def_$r.txt 2>&1; tl "cb def $?"
  TSC_Q4DP_SWD=1 $CB > $O/cb_swd_$r.txt 2>&1; tl "cb swd $?"
  TSC_Q4DP_XV=1 $CB > $O/cb_xv_$r.txt 2>&1; tl "cb xv $?"
  TSC_Q4DP_SWD=1 TSC_Q4DP_XV=1 $CB > $O/cb_both_$r.txt 2>&1; tl "cb swd+xv $?"
done
device_end
