#!/bin/bash
# session 22, device call 4: the shared expert's down as the routed down's last slot (q4dp_moe COLS with sw:
# k_stage_digits + the shared down + the combine -> nothing but a ninth slot in one launch; 85 -> 69 kernels a
# 35B-A3B-8L step); TSC_MOE_SHARED_SLOT=0 the old three launches, same binary, interleaved. Prediction 1,730 ->
# ~1,850 tok/s (8 layers), 423 -> ~450 (40 layers). Tests: the wide synthetic MoE takes the new path in parity,
# speculative and expert-cache tests; memcheck / racecheck on its parity alone (TS_CUDA_ENGINE_QUICK=3).
PACK=.gpu/s22d/pack.tar.xz . bench/cuda/device_env.sh
timeout 100 $B/ts_test cuda > $O/kern.log 2>&1; tl "ts_test cuda $?"
timeout 170 $B/ts_test cuda_engine > $O/eng.log 2>&1; tl "ts_test cuda_engine $?"
TS_CUDA_ENGINE_QUICK=3 timeout 60 compute-sanitizer --tool memcheck $B/ts_test cuda_engine.parity_every_fixture_and_the_default_model > $O/memcheck_wide.log 2>&1; tl "memcheck wide $?"
TS_CUDA_ENGINE_QUICK=3 timeout 60 compute-sanitizer --tool racecheck $B/ts_test cuda_engine.parity_every_fixture_and_the_default_model > $O/racecheck_wide.log 2>&1; tl "racecheck wide $?"
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
for r in a b; do
  bj 35b8_dec_slot_$r "X=1" $S/35b8 --prompt 512 --gen 128 --runs 2
  bj 35b8_dec_old_$r "TSC_MOE_SHARED_SLOT=0" $S/35b8 --prompt 512 --gen 128 --runs 2
done
bj 35b8_mtp3_slot "X=1" $S/35b8 --prompt 512 --gen 128 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
NCU="ncu --clock-control none --metrics gpu__time_duration.sum --csv"
timeout 60 $NCU --launch-count 400 $B/turbospark bench --backend cuda -m $S/35b8 --prompt 1 --gen 3 --runs 1 > $O/ncu35_dec_slot.csv 2>$O/ncu_err.log; tl "ncu $?"
xz -9 $O/ncu*.csv
synth_shape 35b shapes/qwen3.5-35B-A3B.json
bj 35b_dec_slot "X=1" $S/35b --prompt 512 --gen 128 --runs 2
bj 35b_dec_old "TSC_MOE_SHARED_SLOT=0" $S/35b --prompt 512 --gen 128 --runs 2
device_end
