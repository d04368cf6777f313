#!/bin/bash
# session 43, device call 2 (pack s43c: the build of this commit's sources, bar this file): the routed MoE down's
# digits made once (TSC_MOE_DIG=1), its first weights asked into L2 before its PDL wait (TSC_MOE_PRE=1) and the
# gate/up's right after its wait, ahead of its staging (TSC_MOE_PRE=2; 3 both), all off by default until this call.
# Why: s43-run1's ncu (H200) put 1,090 of the down's 1,920 instructions a warp and 55% of its stall samples on every
# block staging silu(g) * u of all 4608 columns itself.
# Floors and prediction (H200, 35B-A3B-8L, per MoE layer): the down's bytes ~5.3 MB = 1.25 us at the probe; the digits
# launch (3 blocks a token) ~1.7 us + its hand-off ~0.7, as the 9B's SwiGLU digits (s38-run1 trace); the down then
# a copy of 5.8 KB a block (one L2 round trip) + weights + dot + store, ~2-3 us as the GDN out_proj (1.5-1.9 us a
# block in the trace). So ~8.8 -> ~5-5.5 us on the chain a layer: -25..-30 us a step of ~432 us, +6..7% (2,317 ->
# ~2,470 tok/s); PRE=1 another ~-1 us a layer if the down's blocks are resident during the digits launch (+2%),
# PRE=2 up to ~-1 us a layer if the gate/up's weights' DRAM latency (~1 us) passes under its staging (~1.5 us).
PACK=.gpu/s43c/pack.tar.xz . bench/cuda/device_env.sh
timeout 120 $B/ts_test cuda_engine.moe_down_digits_once_same_bits > $O/t_dig.log 2>&1; tl "dig test $?"
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
VN=(d dig dp1 dp3); VE=(X=0 TSC_MOE_DIG=1 "TSC_MOE_DIG=1 TSC_MOE_PRE=1" "TSC_MOE_DIG=1 TSC_MOE_PRE=3")
ab 35b8 $S/35b8 3 --prompt 512 --gen 128 --runs 2
ab 35b8_mtp3 $S/35b8 1 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
TSC_MOE_DIG=1 TSC_MOE_PRE=3 timeout 150 $B/ts_test cuda_engine > $O/t_engine_dig.log 2>&1; tl "cuda_engine dig+pre $?"
synth_shape 35b shapes/qwen3.5-35B-A3B.json
ab 35b $S/35b 1 --prompt 512 --gen 128 --runs 2
export TSC_MOE_DIG=1 TSC_MOE_PRE=3
prof moedown2 'k_q4dp_moe<.int.1, .int.2, .int.2, .bool.0, .bool.1>' 40 2 $S/35b8
prof moegu2 'k_q4dp_moe<.int.1, .int.1, .int.1, .bool.1, .bool.1>' 40 2 $S/35b8
timeout 80 compute-sanitizer --tool memcheck $B/ts_test cuda_engine.moe_down_digits_once_same_bits > $O/cs_dig_mem.log 2>&1; tl "memcheck dig $?"
timeout 60 compute-sanitizer --tool racecheck $B/ts_test cuda_engine.moe_down_digits_once_same_bits > $O/cs_dig_race.log 2>&1; tl "racecheck dig $?"
unset TSC_MOE_DIG TSC_MOE_PRE
device_end
