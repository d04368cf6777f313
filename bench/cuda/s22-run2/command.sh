#!/bin/bash
# session 22, device call 2: the MoE decode kernels from call 1's ncu (k_q4dp_moe: KS from the launch's rows, the
# routes in shared memory, 32-bit indices, U = 1 at one step a warp; k_moe_route in registers with redux.sync picks),
# against the tree before them (turbospark_ref: commit e855b51's build) in the same call, interleaved. Prediction
# (ncu, serialized): gate/up 11.0 -> ~6 us, down 10.2 -> ~7 us, route 6.8 -> ~3 us; 35B-A3B-8L decode 1,640 ->
# ~1,850 tok/s. Then the tests (the wide synthetic MoE added to the parity and speculative tests), memcheck.
PACK=.gpu/s22b/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
bref() { local n=$1; shift; $B/turbospark_ref bench --backend cuda -m "$@" --json > "$O/e_$n.json" 2>>"$O/e_err.log"; tl "e_$n rc $?"; }
for r in a b; do
  bj 35b8_dec_new_$r "X=1" $S/35b8 --prompt 512 --gen 128 --runs 2
  bref 35b8_dec_ref_$r $S/35b8 --prompt 512 --gen 128 --runs 2
done
bj 35b8_mtp3_new "X=1" $S/35b8 --prompt 512 --gen 128 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
bref 35b8_mtp3_ref $S/35b8 --prompt 512 --gen 128 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
NCU="ncu --clock-control none --metrics gpu__time_duration.sum --csv"
timeout 60 $NCU --launch-count 400 $B/turbospark bench --backend cuda -m $S/35b8 --prompt 1 --gen 3 --runs 1 > $O/ncu35_dec_new.csv 2>$O/ncu_err.log; tl "ncu new $?"
timeout 60 $NCU --launch-count 400 $B/turbospark_ref bench --backend cuda -m $S/35b8 --prompt 1 --gen 3 --runs 1 > $O/ncu35_dec_ref.csv 2>>$O/ncu_err.log; tl "ncu ref $?"
xz -9 $O/ncu*.csv
# the 5-row verify cliff of call 1 (MTP 4: 5.04 ms a block against 3.21 for 4 rows): the kernels' step by rows
$B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b.txt 2>&1; tl "cb 9b $?"
timeout 100 $B/ts_test cuda > $O/kern.log 2>&1; tl "ts_test cuda $?"
timeout 150 $B/ts_test cuda_engine > $O/eng.log 2>&1; tl "ts_test cuda_engine $?"
timeout 40 compute-sanitizer --tool memcheck $B/ts_test cuda.moe_route_exact > $O/memcheck_route.log 2>&1; tl "memcheck route $?"
TS_CUDA_ENGINE_QUICK=1 timeout 90 compute-sanitizer --tool memcheck $B/ts_test cuda_engine.parity_every_fixture_and_the_default_model > $O/memcheck_parity.log 2>&1; tl "memcheck parity $?"
synth_shape 35b shapes/qwen3.5-35B-A3B.json
bj 35b_dec_new "X=1" $S/35b --prompt 512 --gen 128 --runs 2
bref 35b_dec_ref $S/35b --prompt 512 --gen 128 --runs 2
device_end
