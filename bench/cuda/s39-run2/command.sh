#!/bin/bash
# session 39, device call 2 (pack s39b: the build of this commit): the attention's work that depends on no earlier
# kernel's output moved before its PDL waits (attn.cu's EA, TSC_ATTN_EARLY=1: the prep's RoPE angles, a double
# power and two double cosines a thread, and the combine's gate), alone and with the prep in the split's blocks
# (FP, TSC_ATTN_FUSE=1, which now makes its angles before the wait too; s39-run1 measured it a loss with them
# after). The combine in the split's tail (s39-run1: -10% on the 9B) is removed. Tests first: the attention kernel
# tests (each form against the three launches bit for bit), memcheck and racecheck on them, the engine's GPU suite
# under EA and under both. Prediction: EA 9B +0.4-0.7% (~1.5 us of a prep's ~3.6 and ~0.5 us of a combine's, 8 a
# step), 35B-A3B-8L +0.2-0.4%; FP with EA about even with the default (s39-run1's -1.5% less the angles' ~2 us).
PACK=.gpu/s39b/pack.tar.xz . bench/cuda/device_env.sh
timeout 120 $B/ts_test cuda.attn_short_parity_and_row_exact cuda.attn_device_pos_big_pieces cuda.attn_digits_same_as_staging > $O/t_attn.log 2>&1; tl "attn tests $?"
timeout 200 compute-sanitizer --tool memcheck $B/ts_test cuda.attn_short_parity_and_row_exact cuda.attn_digits_same_as_staging > $O/t_memcheck.log 2>&1; tl "memcheck $?"
timeout 200 compute-sanitizer --tool racecheck $B/ts_test cuda.attn_short_parity_and_row_exact > $O/t_racecheck.log 2>&1; tl "racecheck $?"
TSC_ATTN_EARLY=1 timeout 150 $B/ts_test cuda_engine > $O/t_engine_ea.log 2>&1; tl "cuda_engine early $?"
TSC_ATTN_EARLY=1 TSC_ATTN_FUSE=1 timeout 150 $B/ts_test cuda_engine > $O/t_engine_fe.log 2>&1; tl "cuda_engine fuse + early $?"
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
VN=(d ea fe); VE=(X=0 TSC_ATTN_EARLY=1 "TSC_ATTN_EARLY=1 TSC_ATTN_FUSE=1")
ab 9b $S/9b 3 --prompt 512 --gen 128 --runs 2
ab 35b8 $S/35b8 2 --prompt 512 --gen 128 --runs 2
VN=(d ea); VE=(X=0 TSC_ATTN_EARLY=1)
ab 9b_mtp3 $S/9b 1 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
timeout 120 $B/ts_test cuda > $O/t_cuda.log 2>&1; tl "cuda $?"
device_end
