#!/bin/bash
# session 26, device call 1 (the s25a pack, built from aac592a): s25-run3 as written (session 24's MoE layer forms:
# TSC_MOE_ROUTE_FUSE=1, TSC_MOE_FUSE_LAYER=1; tests, memcheck, 35B-A3B-8L decode and MTP 3 A/B; the 9B's MTP 1/3
# under the group numerics), then the one-launch argmax (TSC_ARGMAX_ONE=1, whose tests passed in s25-run1) in the
# engine: 9B and default-model decode, interleaved, two rounds. s25-run2's SwiGLU / XV A/B is not run: s25-run1's
# cuda_bench measured both as losses. (~480 s)
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
  bj 35b8_dec_all_$r "TSC_MOE_FUSE_LAYER=1 TSC_ARGMAX_ONE=1" $S/35b8 --prompt 512 --gen 128 --runs 2
done
for v in def route layer; do
  case $v in def) ev=X=1;; route) ev=TSC_MOE_ROUTE_FUSE=1;; layer) ev=TSC_MOE_FUSE_LAYER=1;; esac
  bj 35b8_mtp3_$v "$ev" $S/35b8 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
done
synth_shape 9b shapes/qwen3.5-9B.json
for r in a b; do
  bj 9b_dec_def_$r "X=1" $S/9b --prompt 512 --gen 128 --runs 2
  bj 9b_dec_am1_$r "TSC_ARGMAX_ONE=1" $S/9b --prompt 512 --gen 128 --runs 2
  bj def_dec_def_$r "X=1" models/default --prompt 512 --gen 128 --runs 2
  bj def_dec_am1_$r "TSC_ARGMAX_ONE=1" models/default --prompt 512 --gen 128 --runs 2
done
for d in 1 3; do
  case $d in 1) acc=0.8;; 3) acc=0.8,0.6,0.5;; esac
  bj 9b_acc${d}_g "TSC_Q4G=1" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft $d --accept $acc
  bj 9b_acc${d}_d "X=1" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft $d --accept $acc
done
device_end
