#!/bin/bash
# session 23, device call 6: the final tree's engine tests with the default settings (the q4dp split moved host code:
# calls 3-5 ran the engine only under TSC_Q4G=1), and racecheck on the fused products (k_q4gm's cp.async ring and
# barriers under TSC_Q4G=1 in that test's kind 2; call 3's run hit its 60 s limit). (~320 s)
PACK=.gpu/s23f/pack.tar.xz . bench/cuda/device_env.sh
timeout 150 $B/ts_test cuda_engine > $O/eng.log 2>&1; tl "ts_test cuda_engine $?"
timeout 200 compute-sanitizer --tool racecheck $B/ts_test cuda.fused_products_dp4a > $O/racecheck_fused.log 2>&1; tl "racecheck $?"
device_end
