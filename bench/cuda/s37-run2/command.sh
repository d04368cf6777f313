#!/bin/bash
# session 37, device call 2 (pack s37b of this commit's tree): the MoE layer's short form as the default
# (TSC_MOE_SHGU unset = call 1's "2": the router stages the norm, the shared gate/up in the routed launch at U = 1)
# plus the route made by the router launch's last block (TSC_MOE_ROUTE_TAIL=0: the route kernel, the same bits).
# Build: make -j2 BUILD=build-cuda CUDA=1 WERROR=-Werror all; bench/cuda/pack.sh s37b;
# bench/cuda/slim.sh out-all s37-run2; carry .gpu/s37b.
# Floors and prediction (35B-A3B-8L, H200). The route kernel: one block, ~4 us from its release (session 26's
# engine trace) and a PDL hop (~0.7 us) a MoE layer, for ~1 KB of logits (nothing at the probe). Its work moves into
# the router launch's tail: a fence and an atomic in every block, then one warp's route_row chain (~2 us: 8 expf,
# a double sum, 8 picks of two redux each) in the last block. Prediction: -2..-3 us a MoE layer, 35B-A3B-8L decode
# 2,144 (call 1, the short form at U = 1) -> ~2,190-2,220 tok/s; 64 graph kernels. The old form (TSC_MOE_SHGU=0)
# as the baseline in the same rounds.
PACK=.gpu/s37b/pack.tar.xz . bench/cuda/device_env.sh
timeout 60 $B/ts_test cuda.router_route_tail_same_bits cuda.addnorm_plain_same_bits cuda_engine.moe_shgu_one_launch_fewer_and_exact > $O/t_new.log 2>&1; tl "new tests $?"
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 3 $B/ts_test cuda.router_route_tail_same_bits > $O/memcheck.log 2>&1; tl "memcheck $?"
timeout 60 compute-sanitizer --tool racecheck --error-exitcode 3 $B/ts_test cuda.router_route_tail_same_bits > $O/racecheck.log 2>&1; tl "racecheck $?"
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
VN=(d rk old); VE=(X=0 TSC_MOE_ROUTE_TAIL=0 TSC_MOE_SHGU=0)
ab 35b8 $S/35b8 3 --prompt 512 --gen 128 --runs 2
ab 35b8_mtp3 $S/35b8 1 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
timeout 150 $B/ts_test cuda_engine > $O/t_engine.log 2>&1; tl "ts_test cuda_engine $?"
timeout 120 $B/ts_test cuda > $O/t_cuda.log 2>&1; tl "ts_test cuda $?"
synth_shape 35b shapes/qwen3.5-35B-A3B.json
VN=(d old); VE=(X=0 TSC_MOE_SHGU=0)
ab 35b $S/35b 1 --prompt 512 --gen 128 --runs 2
device_end
