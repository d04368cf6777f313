#!/bin/bash
# session 44, device call 1 (pack s45a: the build of the commit that last changed this file; the trace build did not
# fit beside the tree and the test binary, 72 MB of 64 MiB: it goes in a call of its own):
# 1. the two MoE engine tests as mended (s43-run4's failures: TSC_MOE_GUDIG=2 erred at passes the scratch splits, and
#    a returning check left it set), k_linear's NORM form with and without its early weights (TSC_LIN_PRE=1,
#    addnorm_plain_same_bits), then the engine group at the new defaults (the gate/up's digits made by the route
#    launch);
# 2. the acceptance figures at the new defaults, with the GUDIG A/B and TSC_LIN_PRE=1 beside them (two rounds).
#    TSC_LIN_PRE's floors and prediction (35B-A3B-8L, the router's launch, 65 blocks of 16 KB of bf16 weights): its
#    bytes ~0.35 us at the copy rate; it spent ~3.2 us a block after its wait (s38-run1, H100), an HBM round trip
#    (~0.7-1 us) of it after the norm's staging; loaded before the wait, -0.7..-1 us a MoE layer, +1..2% decode;
# 3. ncu of the route launch (k_moe_route_dg) and the router's launch (k_linear): no prediction, measurements for the
#    next change;
# (the order: what matters most first, should the call be cut short)
# 4. memcheck over a short 35B-A3B-8L MTP run: the route launch's digits at 1 row (decode) and 4 (verify), with the
#    router's early weights.
PACK=.gpu/s45a/pack.tar.xz . bench/cuda/device_env.sh
timeout 120 $B/ts_test cuda_engine.moe_down_digits_once_same_bits cuda_engine.moe_shgu_one_launch_fewer_and_exact > $O/t_moe.log 2>&1; tl "moe tests $?"
timeout 60 $B/ts_test cuda.addnorm_plain_same_bits > $O/t_addnorm.log 2>&1; tl "addnorm $?"
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
synth_shape 9b shapes/qwen3.5-9B.json
VN=(d g0 lp); VE=(X=0 TSC_MOE_GUDIG=0 TSC_LIN_PRE=1)
ab 35b8 $S/35b8 2 --prompt 512 --gen 128 --runs 2
ab 35b8_mtp3 $S/35b8 1 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
timeout 150 $B/ts_test cuda_engine > $O/t_engine.log 2>&1; tl "cuda_engine $?"
TSC_LIN_PRE=1 timeout 100 $B/ts_test cuda_engine.spec_greedy_exact_fixtures cuda_engine.parity_every_fixture_and_the_default_model > $O/t_engine_lp.log 2>&1; tl "engine lp $?"
VN=(d); VE=(X=0)
ab 9b $S/9b 1 --prompt 512 --gen 128 --runs 2
prof route 'k_moe_route_dg' 16 2 $S/35b8
prof router 'k_linear' 40 2 $S/35b8
TSC_LIN_PRE=1 timeout 90 compute-sanitizer --tool memcheck $B/turbospark bench --backend cuda -m $S/35b8 --prompt 16 --gen 12 --runs 1 --spec mtp --draft 3 --accept 0.8,0.6,0.5 > $O/cs_mem.log 2>&1; tl "memcheck 35b8 mtp $?"
device_end
