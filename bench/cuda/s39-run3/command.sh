#!/bin/bash
# session 39, device call 3 (pack s39c: the build of this commit): EA now the default (s39-run2: +0.7% 9B,
# +0.9% 35B-A3B-8L), the prep in the split removed; new opt-in R1 (TSC_ATTN_R1=1): the combine's loads in one
# round (piece t's max and sum by thread t and the first 16 pieces' columns by every thread, all issued together,
# where the loop form waits for three rounds). Prediction: R1 9B +0.3-0.5% (~1-1.4 us of a ~6.5 us combine, 8 a
# step), 35B-A3B-8L +0.2-0.3%. Tests: the attention kernel tests (EA and R1 on and off bit for bit, the digits),
# memcheck and racecheck on them, the engine's GPU suite at the defaults and under R1; the whole GPU kernel group.
PACK=.gpu/s39c/pack.tar.xz . bench/cuda/device_env.sh
timeout 120 $B/ts_test cuda.attn_short_parity_and_row_exact cuda.attn_device_pos_big_pieces cuda.attn_digits_same_as_staging > $O/t_attn.log 2>&1; tl "attn tests $?"
timeout 200 compute-sanitizer --tool memcheck $B/ts_test cuda.attn_short_parity_and_row_exact cuda.attn_digits_same_as_staging > $O/t_memcheck.log 2>&1; tl "memcheck $?"
timeout 200 compute-sanitizer --tool racecheck $B/ts_test cuda.attn_short_parity_and_row_exact cuda.attn_digits_same_as_staging > $O/t_racecheck.log 2>&1; tl "racecheck $?"
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
VN=(d r1 ea0); VE=(X=0 TSC_ATTN_R1=1 TSC_ATTN_EARLY=0)
ab 9b $S/9b 3 --prompt 512 --gen 128 --runs 2
ab 35b8 $S/35b8 2 --prompt 512 --gen 128 --runs 2
VN=(d r1); VE=(X=0 TSC_ATTN_R1=1)
ab 9b_4k $S/9b 1 --prompt 4096 --gen 128 --runs 2
timeout 150 $B/ts_test cuda_engine > $O/t_engine.log 2>&1; tl "cuda_engine $?"
TSC_ATTN_R1=1 timeout 150 $B/ts_test cuda_engine > $O/t_engine_r1.log 2>&1; tl "cuda_engine r1 $?"
timeout 150 $B/ts_test cuda > $O/t_cuda.log 2>&1; tl "cuda $?"
device_end
