#!/bin/bash
# session 45, device call 1 (pack s45b: PACK_MAIN="turbospark ts_test", the build of the commit that last changed
# this file; a reference build of 4d85664 beside them made 84 MB with the tree, over 64 MiB, so the A/B is of
# switches in one binary):
# 1. tests: the deep-prefetch test (cuda.q4dp_prefetch_same_bits), the router's norm form with its early weights now
#    the default (cuda.addnorm_plain_same_bits runs both ways), the engine group at the new defaults, and its parity
#    and drafting tests under TSC_Q4DP_PFD=8;
# 2. k_q4dp's deep L2 prefetch before its PDL wait (TSC_Q4DP_PFD=n steps a warp, q4dp.cu's pf_deep) at 2 / 4 / 8,
#    against the default.
#    Floors (35B-A3B-8L, a GDN layer's in_proj: 14 MB, 4.7 us at the copy rate; measured span 8.1-8.7 us, its blocks
#    resident ~4 us before their release while the MoE down reads ~5 MB in ~5.4 us). Prediction: in_proj, q/k/v and
#    o_proj -1.5..-3 us each, 35B-A3B-8L +2..4% at PFD 4-8; the 9B +0..1% (its products mostly follow products).
# 3. MTP 3 on the 35B-A3B-8L at the default and PFD=8; memcheck over a short MTP run and the test under PFD=8.
# (ordered by priority: the budget left for this call was ~365 s, so it may be cut)
# (cuda.q4dp_prefetch_same_bits mended before this call ever ran: its checks between the switch's push and pop
# record and go on, EXPECT_MSG, so a failure cannot leave TSC_Q4DP_PFD set for the tests after it; repack s45b)
# (review mend after it: TSC_Q4DP_PFD read once a q4dp_linear_staged call, not once a pass; host code only)
PACK=.gpu/s45b/pack.tar.xz . bench/cuda/device_env.sh
timeout 60 $B/ts_test cuda.q4dp_prefetch_same_bits cuda.addnorm_plain_same_bits > $O/t_pf.log 2>&1; tl "pf+addnorm tests $?"
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
VN=(d p2 p4 p8); VE=(X=0 TSC_Q4DP_PFD=2 TSC_Q4DP_PFD=4 TSC_Q4DP_PFD=8)
ab 35b8 $S/35b8 2 --prompt 512 --gen 128 --runs 2
TSC_Q4DP_PFD=8 timeout 100 $B/ts_test cuda_engine.spec_greedy_exact_fixtures cuda_engine.parity_every_fixture_and_the_default_model > $O/t_engine_pf.log 2>&1; tl "engine pf8 $?"
synth_shape 9b shapes/qwen3.5-9B.json
ab 9b $S/9b 1 --prompt 512 --gen 128 --runs 2
VN=(d p8); VE=(X=0 TSC_Q4DP_PFD=8)
ab 35b8_mtp3 $S/35b8 1 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
TSC_Q4DP_PFD=8 timeout 90 compute-sanitizer --tool memcheck $B/turbospark bench --backend cuda -m $S/35b8 --prompt 16 --gen 12 --runs 1 --spec mtp --draft 3 --accept 0.8,0.6,0.5 > $O/cs_mem.log 2>&1; tl "memcheck 35b8 mtp $?"
timeout 150 $B/ts_test cuda_engine > $O/t_engine.log 2>&1; tl "cuda_engine $?"
timeout 120 compute-sanitizer --tool memcheck $B/ts_test cuda.q4dp_prefetch_same_bits > $O/cs_mem_t.log 2>&1; tl "memcheck pf test $?"
device_end
