#!/bin/bash
# session 25, device call 3: session 24 call 2 as it was written (bench/cuda/s24-run2), on the s25a pack: a MoE layer in fewer launches, both
# forms opt-in until this call, one binary. (a) TSC_MOE_ROUTE_FUSE=1: the routes made inside the routed experts'
# gate/up launch (k_q4dp_moe's RT form, route.cuh shared with k_moe_route: the same bits), one launch fewer a layer;
# (b) TSC_MOE_FUSE_LAYER=1: also the pending norm taken by the bf16 router (k_linear's norm form) and the shared
# expert's gate/up as the routed gate/up's slot k (k_q4dp_moe's SH form), three launches a layer where there were
# five (other bits: the shared gate/up's column split). Prediction, 35B-A3B-8L decode 1,776 tok/s: (a) ~1,850-1,900,
# (b) ~2,000-2,100. Tests first: the plain norm form against tsc_add_rmsnorm + tsc_linear (bits), the route test,
# the two new engine tests, all of cuda_engine with (a) on, the spec, parity and expert-streaming tests with (b) on
# (a streamed layer must keep the resident bits under it too), memcheck on the
# new engine tests. Also the group numerics' 2-row passes on k_q4g (TSC_Q4G_DP=2) in MTP 1/3. (~420 s)
PACK=.gpu/s25a/pack.tar.xz . bench/cuda/device_env.sh
timeout 90 $B/ts_test cuda.addnorm_plain_formats_same_bits cuda.moe_route_exact > $O/kern.log 2>&1; tl "ts_test kernels $?"
timeout 120 $B/ts_test cuda_engine.moe_routes_in_the_expert_launch_same_bits cuda_engine.moe_fused_layer_exact_and_fewer_launches > $O/eng_new.log 2>&1; tl "ts_test new engine tests $?"
TSC_MOE_ROUTE_FUSE=1 timeout 200 $B/ts_test cuda_engine > $O/eng_route.log 2>&1; tl "ts_test cuda_engine (routes fused) $?"
TSC_MOE_FUSE_LAYER=1 timeout 180 $B/ts_test cuda_engine.parity_every_fixture_and_the_default_model cuda_engine.spec_greedy_exact_fixtures cuda_engine.spec_graphs_exact_and_replayed cuda_engine.expert_cache_identical_to_resident cuda_engine.expert_host_tier_identical_to_resident > $O/eng_layer.log 2>&1; tl "ts_test spec + parity + streaming (fused layer) $?"
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 $B/ts_test cuda_engine.moe_fused_layer_exact_and_fewer_launches > $O/memcheck.log 2>&1; tl "memcheck $?"
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
for r in a b c; do
  bj 35b8_dec_def_$r "X=1" $S/35b8 --prompt 512 --gen 128 --runs 2
  bj 35b8_dec_route_$r "TSC_MOE_ROUTE_FUSE=1" $S/35b8 --prompt 512 --gen 128 --runs 2
  bj 35b8_dec_layer_$r "TSC_MOE_FUSE_LAYER=1" $S/35b8 --prompt 512 --gen 128 --runs 2
done
for v in def route layer; do
  case $v in def) ev=X=1;; route) ev=TSC_MOE_ROUTE_FUSE=1;; layer) ev=TSC_MOE_FUSE_LAYER=1;; esac
  bj 35b8_mtp3_$v "$ev" $S/35b8 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
done
synth_shape 9b shapes/qwen3.5-9B.json
for d in 1 3; do
  case $d in 1) acc=0.8;; 3) acc=0.8,0.6,0.5;; esac
  bj 9b_acc${d}_g "TSC_Q4G=1" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft $d --accept $acc
done
device_end
