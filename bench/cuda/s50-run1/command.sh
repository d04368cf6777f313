#!/bin/bash
# Prepared in session 49 (U's bits and A/B), extended in session 50 with CD (TSC_MOE_CD=1: the MoE down's digits
# made by the gate/up's clusters, q4dp.cu; opt-in). Pack s50b: the build of the moe-cd commit (make -j2
# BUILD=build-cuda CUDA=1 WERROR=-Werror all; PACK_MAIN="turbospark ts_test" bash bench/cuda/pack.sh s50b without
# build-cuda-trace; slim.sh out-all s50-run1). ~300 s of command.
# U (TSC_GDN_NBU=1: k_gdn_fused's N instances without their 64-register bound) was the fastest form on both shapes
# in s49-run1 (35B-A3B-8L +0.4%, 9B +0.2% against the neutral forms), but its bit tests were cut from that call.
# 1. Bits: U's GDN tests; CD's engine test (one kernel fewer a MoE layer, TSC_MOE_CD=2 proving every one-token pass
#    took it, prompt logits and greedy ids with and without drafting bit for bit); the engine's parity and drafting
#    tests with both on.
# 2. A/B, forms interleaved: the 35B-A3B-8L d / nbu / cd / both, two rounds in that order and one reversed; the 9B
#    (no MoE layer: CD does not apply) d / nbu, the same; MTP 3 at forced acceptance, d against both.
#    Predictions: U as s49-run1 (+0.2% 9B, +0.4% 35B-A3B-8L); CD -1.2..-1.7 us a MoE layer, 35B-A3B-8L +2-3%.
# 3. The 40-layer 35B-A3B (~18 GB synthesized), d against both, last for time.
PACK=.gpu/s50b/pack.tar.xz . bench/cuda/device_env.sh
TSC_GDN_NBU=1 timeout 120 $B/ts_test cuda.gdn_nb2_same_bits cuda.gdn_digits_same_as_staging cuda.gdn_fused_same_bits > $O/t_nbu.log 2>&1; tl "nbu tests $?"
timeout 150 $B/ts_test cuda_engine.moe_cluster_digits_same_bits cuda_engine.moe_down_digits_once_same_bits > $O/t_cd.log 2>&1; tl "cd tests $?"
TSC_GDN_NBU=1 TSC_MOE_CD=1 timeout 200 $B/ts_test cuda_engine.spec_greedy_exact_fixtures cuda_engine.parity_every_fixture_and_the_default_model cuda_engine.spec_greedy_exact_default_model > $O/t_engine_both.log 2>&1; tl "engine under both $?"
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
synth_shape 9b shapes/qwen3.5-9B.json
VN=(d nbu cd both); VE=(X=0 TSC_GDN_NBU=1 TSC_MOE_CD=1 "TSC_GDN_NBU=1 TSC_MOE_CD=1")
ab 35b8 $S/35b8 2 --prompt 512 --gen 128 --runs 2
VN=(both cd nbu d); VE=("TSC_GDN_NBU=1 TSC_MOE_CD=1" TSC_MOE_CD=1 TSC_GDN_NBU=1 X=0)
ab 35b8r $S/35b8 1 --prompt 512 --gen 128 --runs 2
VN=(d nbu); VE=(X=0 TSC_GDN_NBU=1)
ab 9b $S/9b 2 --prompt 512 --gen 128 --runs 2
VN=(nbu d); VE=(TSC_GDN_NBU=1 X=0)
ab 9br $S/9b 1 --prompt 512 --gen 128 --runs 2
VN=(d both); VE=(X=0 "TSC_GDN_NBU=1 TSC_MOE_CD=1")
card_mtp
synth_shape 35b shapes/qwen3.5-35B-A3B.json
ab 35b $S/35b 1 --prompt 512 --gen 128 --runs 2
device_end
