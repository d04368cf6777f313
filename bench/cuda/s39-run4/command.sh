#!/bin/bash
# session 39, device call 4 (pack s39d: the normal build of this commit): (1) new opt-in Q in the GDN step (TSC_GDN_Q=1, k_gdn_fused's Q: a thread's first loads of the
# in_proj's outputs, its gates, its first z and row 0's q/k/v channels, issued together right after the PDL wait,
# where warp 0 took them in three dependent rounds): its kernel tests bit for bit under it, memcheck and racecheck,
# the engine's GPU suite under it; A/B against the defaults and against the session's start (TSC_ATTN_EARLY=0
# TSC_ATTN_R1=0). Prediction: Q 9B +0.3-0.6% (0.2-0.5 us of each GDN step's ~7 us, 24 a step), 35B-A3B-8L +0.2-0.4%.
# (2) the figures of record at the defaults: 9B at 4,096 tokens, MTP 3, the 0.8B and 40-layer 35B-A3B shapes.
PACK=.gpu/s39d/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
VN=(d q s0); VE=(X=0 TSC_GDN_Q=1 "TSC_ATTN_EARLY=0 TSC_ATTN_R1=0")
ab 9b $S/9b 3 --prompt 512 --gen 128 --runs 2
ab 35b8 $S/35b8 2 --prompt 512 --gen 128 --runs 2
VN=(d q); VE=(X=0 TSC_GDN_Q=1)
ab 9b_mtp3 $S/9b 1 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
bj 9b_4k_d_a X=0 $S/9b --prompt 4096 --gen 128 --runs 2
TSC_GDN_Q=1 timeout 150 $B/ts_test cuda.gdn_step_parity_and_row_exact cuda.gdn_digits_same_as_staging cuda.gdn_fused_same_bits cuda.gdn_step_engine_forms > $O/t_gdn_q.log 2>&1; tl "gdn tests under Q $?"
TSC_GDN_Q=1 timeout 200 compute-sanitizer --tool memcheck $B/ts_test cuda.gdn_fused_same_bits > $O/t_memcheck_q.log 2>&1; tl "memcheck Q $?"
TSC_GDN_Q=1 timeout 150 $B/ts_test cuda_engine > $O/t_engine_q.log 2>&1; tl "cuda_engine Q $?"
synth_shape 08b shapes/qwen3.5-0.8B.json
bj 08b_d_a X=0 $S/08b --prompt 512 --gen 128 --runs 2
synth_shape 35b shapes/qwen3.5-35B-A3B.json
bj 35b_d_a X=0 $S/35b --prompt 512 --gen 128 --runs 2
device_end
