#!/bin/bash
# session 41, device call 2 (pack s41b: the normal build of this commit, whose q4dp.cu is 2601fa9's: 127 kernels
# byte-identical, text_cmp). No build needed for the A/B: N7 = TSC_Q4DP_DIG=7, the one-row normed passes (in_proj,
# q+k+v, gate/up: 64 a 9B step) staged once by k_stage_digits (one block a row, the one-pass norm) and read where they
# lie by the product (DX = 2: its first round of weights in registers before the PDL wait, while that one block runs),
# instead of every one of the product's 264 blocks making the row's norm and digits (N1: 32 KB of L2 reads a block,
# ~3 us a launch over its bytes in s38-run4's trace). Session 16 measured this a loss at one row (its stage kernel ~5
# us then), before the one-pass staging (s27) and DX (s32). Exact: the digits are the same bits either way (the fused
# tests under it; the engine's GPU suite under it, the default model present this time). Prediction: 9B +1-3%,
# 35B-A3B-8L +0.5-1.5%, small models more (launch-bound: a launch added where 264 blocks' staging goes).
# Then figures of record at the defaults (MTP 3, 4,096 tokens, the 40-layer 35B-A3B, the default model).
PACK=.gpu/s41b/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
TSC_Q4DP_DIG=7 timeout 150 $B/ts_test cuda.fused_products_dp4a cuda.addnorm_plain_same_bits > $O/t_fused_n7.log 2>&1; tl "fused tests under N7 $?"
VN=(d n7); VE=(X=0 TSC_Q4DP_DIG=7)
ab 9b $S/9b 3 --prompt 512 --gen 128 --runs 2
ab 35b8 $S/35b8 2 --prompt 512 --gen 128 --runs 2
abcb 9b 1 --shape 9b --mlx --digits 1
synth_shape 08b shapes/qwen3.5-0.8B.json
ab 08b $S/08b 2 --prompt 512 --gen 128 --runs 2
ab default models/default 2 --prompt 512 --gen 128 --runs 2
TSC_Q4DP_DIG=7 timeout 200 $B/ts_test cuda_engine > $O/t_engine_n7.log 2>&1; tl "cuda_engine under N7 $?"
ab 9b_mtp3 $S/9b 1 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
ab 9b_4k $S/9b 1 --prompt 4096 --gen 128 --runs 2
synth_shape 35b shapes/qwen3.5-35B-A3B.json
ab 35b $S/35b 1 --prompt 512 --gen 128 --runs 2
device_end
