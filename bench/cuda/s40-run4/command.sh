#!/bin/bash
# session 40, device call 4 (pack s40d: the normal build of this commit): GC (attn.cu, the default; TSC_ATTN_GC=0
# the old form): the attention split's accumulators sized for its query heads a KV head (G = 4 on the 9B: 4 where
# there were 16 predicated loads and FMAs a key) and its staging's indices stepped instead of divided. s40-run3's ncu:
# ~2,650 instructions a warp for a 32-key piece, 1,180 of them the weighted V sum, ~600 the staging's divisions.
# (1) exact: the attention tests (GC on and off bit for bit, new shapes G = 1, 2, 3, 8, 16 and D = 96, 160), the
# digits test, memcheck and racecheck of the short attention test, the engine's GPU suite at the new default;
# (2) the A/B, interleaved. Prediction: the split 8.7 -> ~5-6 us a layer: 9B +1-1.5% at 512 tokens, more at 4,096;
# 35B-A3B-8L +0.5-1%.
PACK=.gpu/s40d/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
timeout 120 $B/ts_test cuda.attn_short_parity_and_row_exact cuda.attn_device_pos_big_pieces cuda.attn_same_pos_rows cuda.attn_pieces_by_row_length cuda.attn_long_split_parity_and_row_exact cuda.attn_digits_same_as_staging > $O/t_attn.log 2>&1; tl "attn tests $?"
VN=(d g0); VE=(X=0 TSC_ATTN_GC=0)
ab 9b $S/9b 3 --prompt 512 --gen 128 --runs 2
ab 35b8 $S/35b8 2 --prompt 512 --gen 128 --runs 2
ab 9b_4k $S/9b 1 --prompt 4096 --gen 128 --runs 2
ab 9b_mtp3 $S/9b 1 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
timeout 150 compute-sanitizer --tool memcheck $B/ts_test cuda.attn_short_parity_and_row_exact > $O/cs_attn_mem.log 2>&1; tl "memcheck attn $?"
timeout 150 compute-sanitizer --tool racecheck $B/ts_test cuda.attn_short_parity_and_row_exact > $O/cs_attn_race.log 2>&1; tl "racecheck attn $?"
timeout 150 $B/ts_test cuda_engine > $O/t_engine.log 2>&1; tl "cuda_engine $?"
device_end
