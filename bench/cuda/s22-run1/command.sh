#!/bin/bash
# session 22, device call 1: (1) the router's product routes in its last block (tsc_linear_route, new test
# cuda.linear_route_same_bits; TSC_ROUTE_FUSED=0 the old two launches, same binary): prediction 35B-A3B-8L decode
# 1,650 -> ~1,700 tok/s (a launch and a hand-off off each of 8 MoE layers, ~1.5-3 us each); (2) issue 17's forced
# acceptance on the 9B (bench --accept, MTP drafts 1..4 at 0.8 / 0.6 / 0.5 [/ 0.4] by position) against SGLang's
# 521 tok/s; (3) compute-sanitizer on session 21's WY prep kernel (not re-run after call 6) and the new launch;
# (4) ncu's full sections of the MoE decode kernels (why the routed gate/up and down take ~10 us for ~2 us of bytes).
PACK=.gpu/s22a/pack.tar.xz . bench/cuda/device_env.sh
timeout 100 $B/ts_test cuda > $O/kern.log 2>&1; tl "ts_test cuda $?"
timeout 100 $B/ts_test cuda_engine > $O/eng.log 2>&1; tl "ts_test cuda_engine $?"
timeout 60 compute-sanitizer --tool memcheck $B/ts_test cuda.gdn_prefill_vs_step > $O/memcheck_wy.log 2>&1; tl "memcheck wy $?"
timeout 60 compute-sanitizer --tool racecheck $B/ts_test cuda.gdn_prefill_vs_step > $O/racecheck_wy.log 2>&1; tl "racecheck wy $?"
timeout 40 compute-sanitizer --tool memcheck $B/ts_test cuda.linear_route_same_bits > $O/memcheck_route.log 2>&1; tl "memcheck route $?"
timeout 40 compute-sanitizer --tool racecheck $B/ts_test cuda.linear_route_same_bits > $O/racecheck_route.log 2>&1; tl "racecheck route $?"
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
for r in a b; do
  bj 35b8_dec_fused_$r "X=1" $S/35b8 --prompt 512 --gen 128 --runs 2
  bj 35b8_dec_old_$r "TSC_ROUTE_FUSED=0" $S/35b8 --prompt 512 --gen 128 --runs 2
done
bj 9b_acc1 "X=1" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 1 --accept 0.8
bj 9b_acc2 "X=1" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 2 --accept 0.8,0.6
bj 9b_acc3 "X=1" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
bj 9b_acc4 "X=1" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 4 --accept 0.8,0.6,0.5,0.4
bj 9b_rej3 "X=1" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3
timeout 90 ncu --clock-control none --set full -k regex:"k_q4dp_moe|k_linear|k_moe_route" --launch-skip 40 --launch-count 6 \
  $B/turbospark bench --backend cuda -m $S/35b8 --prompt 1 --gen 8 --runs 1 > $O/ncu35_moe_full.txt 2>$O/ncu_err.log; tl "ncu full $?"
xz -9 $O/ncu*.txt
device_end
