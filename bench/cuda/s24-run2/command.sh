#!/bin/bash
# session 24, device call 2: the MoE routes made inside the routed experts' gate/up launch (k_q4dp_moe's RT form,
# route.cuh shared with k_moe_route; TSC_MOE_ROUTE_FUSE=1, opt-in until this call; =0 the route launch, one binary): one launch fewer a
# MoE layer. Prediction: 35B-A3B-8L decode 1,776 -> ~1,850-1,900 tok/s (the route launch ~4-6 us a layer in the
# graph, its chain now overlapping the x staging). Tests first: the new engine test (same bits both forms, one kernel
# fewer a layer), the route test, then all of cuda_engine with the fused routes (the default path's kernels are
# unchanged: text_cmp); memcheck on the new test. Also the group numerics' 2-row
# passes on k_q4g, 3..16 on k_q4gm (TSC_Q4G_DP=2, call 1's choice) in MTP 1/3 under TSC_Q4G=1. (~330 s)
PACK=.gpu/s24c/pack.tar.xz . bench/cuda/device_env.sh
timeout 60 $B/ts_test cuda.moe_route_exact > $O/route.log 2>&1; tl "ts_test route $?"
TSC_MOE_ROUTE_FUSE=1 timeout 200 $B/ts_test cuda_engine > $O/eng_fuse.log 2>&1; tl "ts_test cuda_engine (route fuse) $?"
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 $B/ts_test cuda_engine.moe_routes_in_the_expert_launch_same_bits > $O/memcheck.log 2>&1; tl "memcheck $?"
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
for r in a b c; do
  bj 35b8_dec_fuse_$r "TSC_MOE_ROUTE_FUSE=1" $S/35b8 --prompt 512 --gen 128 --runs 2
  bj 35b8_dec_sep_$r "TSC_MOE_ROUTE_FUSE=0" $S/35b8 --prompt 512 --gen 128 --runs 2
done
bj 35b8_mtp3_fuse "TSC_MOE_ROUTE_FUSE=1" $S/35b8 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
bj 35b8_mtp3_sep "TSC_MOE_ROUTE_FUSE=0" $S/35b8 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
synth_shape 9b shapes/qwen3.5-9B.json
for d in 1 3; do
  case $d in 1) acc=0.8;; 3) acc=0.8,0.6,0.5;; esac
  bj 9b_acc${d}_g "TSC_Q4G=1" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft $d --accept $acc
done
device_end
