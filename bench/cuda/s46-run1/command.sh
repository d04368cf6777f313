#!/bin/bash
# session 46, device call 1: s45-run1's command cut to what fits ~300 s of device time (session 46 lost ~1,400 s
# to refused starts before it). The same pack (s45b: the build of 6f27eb9; PACK_MAIN="turbospark ts_test").
# What it decides: whether k_q4dp's deep L2 prefetch before its PDL wait (TSC_Q4DP_PFD=n, q4dp.cu's pf_deep) becomes
# the default (a depth that wins on the 35B-A3B-8L and loses nothing on the 9B) or is removed (none wins).
# Prediction (session 45): 35B-A3B-8L +2..4% at n = 4..8, the 9B +0..1%.
# Dropped from s45-run1 for time: depth 2, the 9B's second round, the MTP run under memcheck, the full engine group.
PACK=.gpu/s45b/pack.tar.xz . bench/cuda/device_env.sh
timeout 40 $B/ts_test cuda.q4dp_prefetch_same_bits cuda.addnorm_plain_same_bits > $O/t_pf.log 2>&1; tl "pf+addnorm tests $?"
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
VN=(d p4 p8); VE=(X=0 TSC_Q4DP_PFD=4 TSC_Q4DP_PFD=8)
ab 35b8 $S/35b8 2 --prompt 512 --gen 128 --runs 2
TSC_Q4DP_PFD=8 timeout 100 $B/ts_test cuda_engine.spec_greedy_exact_fixtures cuda_engine.parity_every_fixture_and_the_default_model > $O/t_engine_pf.log 2>&1; tl "engine pf8 $?"
VN=(d p8); VE=(X=0 TSC_Q4DP_PFD=8)
ab 35b8_mtp3 $S/35b8 1 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
synth_shape 9b shapes/qwen3.5-9B.json
ab 9b $S/9b 1 --prompt 512 --gen 128 --runs 2
timeout 90 compute-sanitizer --tool memcheck $B/ts_test cuda.q4dp_prefetch_same_bits > $O/cs_mem_t.log 2>&1; tl "memcheck pf test $?"
device_end
