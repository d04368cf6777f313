#!/bin/bash
# session 39, device call 1 (pack s39a: the build of this commit): the attention decode in one launch
# (attn.cu, k_attn_split_lk's FP and TL; TSC_ATTN_FUSE mask, 0 by default). Tests first: the attention kernel
# tests (the fused forms against the three launches bit for bit, out over v, the counters back at 0; the combine's
# digits in the tail), memcheck and racecheck on them, the engine's GPU suite with both forms on. Then the engine
# A/B, interleaved: default, FP, TL, both (9B, 35B-A3B-8L); the 9B's carveout against the driver's (TSC_CARVE=-1:
# session 38 measured it on H100s only); the 9B's MTP 3 verify and a 4096-token context with both forms.
# Prediction: 9B +2.5-3.5% with both (prep ~3.8 us + hop, combine ~6.5 us + hop a layer, ~2.5 us of tail added),
# ~+1.2% FP alone, ~+1.5% TL alone; 35B-A3B-8L +1-1.5% (2 of 8 layers).
PACK=.gpu/s39a/pack.tar.xz . bench/cuda/device_env.sh
timeout 120 $B/ts_test cuda.attn_short_parity_and_row_exact cuda.attn_device_pos_big_pieces cuda.attn_digits_same_as_staging > $O/t_attn.log 2>&1; tl "attn tests $?"
timeout 120 $B/ts_test cuda > $O/t_cuda.log 2>&1; tl "cuda $?"
timeout 200 compute-sanitizer --tool memcheck $B/ts_test cuda.attn_short_parity_and_row_exact cuda.attn_digits_same_as_staging > $O/t_memcheck.log 2>&1; tl "memcheck $?"
timeout 200 compute-sanitizer --tool racecheck $B/ts_test cuda.attn_short_parity_and_row_exact > $O/t_racecheck.log 2>&1; tl "racecheck $?"
TSC_ATTN_FUSE=3 timeout 150 $B/ts_test cuda_engine > $O/t_engine_f3.log 2>&1; tl "cuda_engine fuse 3 $?"
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
VN=(d f1 f2 f3 c0); VE=(X=0 TSC_ATTN_FUSE=1 TSC_ATTN_FUSE=2 TSC_ATTN_FUSE=3 TSC_CARVE=-1)
ab 9b $S/9b 2 --prompt 512 --gen 128 --runs 2
VN=(d f1 f2 f3); VE=(X=0 TSC_ATTN_FUSE=1 TSC_ATTN_FUSE=2 TSC_ATTN_FUSE=3)
ab 35b8 $S/35b8 2 --prompt 512 --gen 128 --runs 2
VN=(d f3); VE=(X=0 TSC_ATTN_FUSE=3)
ab 9b_mtp3 $S/9b 1 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
ab 9b_4k $S/9b 1 --prompt 4096 --gen 128 --runs 2
device_end
