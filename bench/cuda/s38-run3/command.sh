#!/bin/bash
# session 38, device call 3 (pack s38b: the build of this commit's tree): three changes, each behind a switch.
# (1) MoE routing's picks by a sorting network (misc.cu route_row_net, the default; TSC_ROUTE_NET=0 the chain).
#     Floors: 256 logits, 1 KB, nothing; the chain was ~1,100 dependent instructions on one warp (ncu s38-run2:
#     8,800 cycles). Prediction: the route kernel 4.3 -> ~2 us, 35B-A3B-8L -17..-20 us a step (+3.5-4%).
# (2) k_gdn_fused's H (TSC_GDN_HOIST=1, opt-in): the rows' gates and z loaded with q, k, v. Prediction: -0.5..-1 us
#     a GDN layer: 9B +0.6-1.2%, 35B-A3B-8L +0.6-1.2%.
# (3) TSC_Q4DP_NPF=1|2 (a measurement): no L2 prefetch before the wait where the digits come from a k_stage_digits
#     launch just before (1: the 9B's down after the SwiGLU staging, whose release came 2.5 us after that launch
#     ended in s38-run1's trace) or on every one-row DX / normed launch (2). No prediction of sign: a test of why.
# Tests: the route's two forms against the CPU and each other bit for bit; the GDN tests and the engine suite under
# H; memcheck / racecheck on both. Build: make -j2 BUILD=build-cuda CUDA=1 WERROR=-Werror all; bench/cuda/pack.sh
# s38b (the trace build moved aside); bench/cuda/slim.sh out-all s38-run3; carry .gpu/s38b.
PACK=.gpu/s38b/pack.tar.xz . bench/cuda/device_env.sh
timeout 120 $B/ts_test cuda.moe_route_exact cuda.fused_products_dp4a cuda.addnorm_plain_same_bits > $O/t_k.log 2>&1; tl "kernel tests $?"
GT="cuda.gdn_step_parity_and_row_exact cuda.gdn_digits_same_as_staging cuda.gdn_step_engine_forms cuda.gdn_fused_same_bits"
TSC_GDN_HOIST=1 timeout 120 $B/ts_test $GT > $O/t_gdn_h.log 2>&1; tl "gdn tests under H $?"
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
synth_shape 9b shapes/qwen3.5-9B.json
VN=(d rt0 ho np1); VE=(X=0 TSC_ROUTE_NET=0 TSC_GDN_HOIST=1 TSC_Q4DP_NPF=1)
ab 35b8 $S/35b8 2 --prompt 512 --gen 128 --runs 2
VN=(d ho np1 np2); VE=(X=0 TSC_GDN_HOIST=1 TSC_Q4DP_NPF=1 TSC_Q4DP_NPF=2)
ab 9b $S/9b 2 --prompt 512 --gen 128 --runs 2
VN=(d rt0); VE=(X=0 TSC_ROUTE_NET=0)
ab 35b8_mtp3 $S/35b8 1 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
TSC_GDN_HOIST=1 timeout 150 $B/ts_test cuda_engine > $O/t_engine_h.log 2>&1; tl "cuda_engine under H $?"
timeout 60 compute-sanitizer --tool memcheck $B/ts_test cuda.moe_route_exact > $O/cs_route.log 2>&1; tl "memcheck route $?"
TSC_GDN_HOIST=1 timeout 80 compute-sanitizer --tool memcheck $B/ts_test cuda.gdn_fused_same_bits > $O/cs_gdn_mem.log 2>&1; tl "memcheck gdn H $?"
TSC_GDN_HOIST=1 timeout 80 compute-sanitizer --tool racecheck $B/ts_test cuda.gdn_fused_same_bits > $O/cs_gdn_race.log 2>&1; tl "racecheck gdn H $?"
device_end
