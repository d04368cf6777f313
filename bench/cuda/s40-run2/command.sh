#!/bin/bash
# session 40, device call 2 (pack s40b: the normal build of this commit, and bench/cuda/l2ahead.cu built alone; the
# first call, s40-run1, never started: its A/B and probe are here, its traces are not).
# (1) NX (TSC_L2N=MB, q4dp.cu: the one-row products after a mixer, out_proj and o_proj, ask the next product's first
# lines into L2, striped over its slots, before their PDL wait; given that product when the capture ends): it takes
# (TSC_L2N_LOG's count of rewritten nodes); a hint (the new cuda_engine.l2n_hint_same_tokens, the engine's GPU
# suite under TSC_L2N=16, memcheck of a short 9B decode under it); the A/B at 8 / 16 / 32 MB against the default,
# interleaved. Prediction: 9B +3-5% (the gate/up 2-4 us shorter in each of 32 layers), 35B-A3B-8L +1-2% (its
# shared expert's gate/up after 8 mixers; the routed experts are not known before routing).
# (2) in the same rounds, the defaults against session 38's H200 forms (s0: TSC_ATTN_EARLY=0 TSC_ATTN_R1=0
# TSC_CARVE=-1); the 9B rows table (verify cost); l2ahead's striped form (both+sA; prediction both+s8..s16
# 0.05-0.15 ms under both, where s30-run1's contiguous both+A could not gain).
PACK=.gpu/s40b/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
TSC_L2N=16 TSC_L2N_LOG=1 $B/turbospark bench --backend cuda -m $S/9b --prompt 64 --gen 16 --runs 1 > $O/nx_log_9b.txt 2>&1; tl "nx log 9b $?"
TSC_L2N=16 TSC_L2N_LOG=1 $B/turbospark bench --backend cuda -m $S/35b8 --prompt 64 --gen 16 --runs 1 > $O/nx_log_35b8.txt 2>&1; tl "nx log 35b8 $?"
VN=(d n8 n16 n32 s0); VE=(X=0 TSC_L2N=8 TSC_L2N=16 TSC_L2N=32 "TSC_ATTN_EARLY=0 TSC_ATTN_R1=0 TSC_CARVE=-1")
ab 9b $S/9b 3 --prompt 512 --gen 128 --runs 2
ab 35b8 $S/35b8 2 --prompt 512 --gen 128 --runs 2
timeout 120 $B/ts_test cuda_engine.l2n_hint_same_tokens > $O/t_l2n.log 2>&1; tl "l2n test $?"
timeout 60 .gpu/s40b/l2ahead > $O/l2ahead.txt 2>&1; tl "l2ahead $?"
timeout 60 $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b.txt 2>&1; tl "cuda_bench 9b $?"
VN=(d n16); VE=(X=0 TSC_L2N=16)
ab 9b_mtp3 $S/9b 1 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
TSC_L2N=16 timeout 200 $B/ts_test cuda_engine > $O/t_engine_n16.log 2>&1; tl "cuda_engine under TSC_L2N=16 $?"
TSC_L2N=16 timeout 120 compute-sanitizer --tool memcheck $B/turbospark bench --backend cuda -m $S/9b --prompt 16 --gen 8 --runs 1 > $O/cs_mem_n16.log 2>&1; tl "memcheck 9b n16 $?"
bj 9b_4k_d_a X=0 $S/9b --prompt 4096 --gen 128 --runs 2
synth_shape 08b shapes/qwen3.5-0.8B.json
bj 08b_d_a X=0 $S/08b --prompt 512 --gen 128 --runs 2
bj 08b_n16_a TSC_L2N=16 $S/08b --prompt 512 --gen 128 --runs 2
synth_shape 35b shapes/qwen3.5-35B-A3B.json
bj 35b_d_a X=0 $S/35b --prompt 512 --gen 128 --runs 2
device_end
