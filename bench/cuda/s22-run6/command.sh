#!/bin/bash
# session 22, device call 6: the routes made in the routed gate/up kernel's prologue (every block routes the pass's
# tokens with route.cuh's route_row, block 0 writes them for the down): k_moe_route's launch and hand-off off each
# MoE layer (69 -> 61 kernels a 35B-A3B-8L step); TSC_MOE_ROUTE_GU=0 the route kernel, same binary, interleaved.
# Prediction 1,770 -> ~1,830 tok/s. The expert-cache test now compares the prologue's routes (resident) with the
# route kernel's (streamed layers route apart): bit for bit or it fails.
PACK=.gpu/s22f/pack.tar.xz . bench/cuda/device_env.sh
timeout 100 $B/ts_test cuda > $O/kern.log 2>&1; tl "ts_test cuda $?"
timeout 170 $B/ts_test cuda_engine > $O/eng.log 2>&1; tl "ts_test cuda_engine $?"
TS_CUDA_ENGINE_QUICK=3 timeout 60 compute-sanitizer --tool racecheck $B/ts_test cuda_engine.parity_every_fixture_and_the_default_model > $O/racecheck_wide.log 2>&1; tl "racecheck wide $?"
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
for r in a b; do
  bj 35b8_dec_rgu_$r "X=1" $S/35b8 --prompt 512 --gen 128 --runs 2
  bj 35b8_dec_old_$r "TSC_MOE_ROUTE_GU=0" $S/35b8 --prompt 512 --gen 128 --runs 2
done
NCU="ncu --clock-control none --metrics gpu__time_duration.sum --csv"
timeout 60 $NCU --launch-count 400 $B/turbospark bench --backend cuda -m $S/35b8 --prompt 1 --gen 3 --runs 1 > $O/ncu35_dec_rgu.csv 2>$O/ncu_err.log; tl "ncu $?"
xz -9 $O/ncu*.csv
synth_shape 35b shapes/qwen3.5-35B-A3B.json
bj 35b_dec_rgu "X=1" $S/35b --prompt 512 --gen 128 --runs 2
bj 35b_dec_old "TSC_MOE_ROUTE_GU=0" $S/35b --prompt 512 --gen 128 --runs 2
device_end
