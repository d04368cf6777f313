#!/bin/bash
# session 41, device call 4 (pack s41c: the normal build of this commit). N1P (TSC_Q4DP_N1PRE=1, q4dp.cu): the normed
# one-row products that stage their row in the blocks (N1: in_proj, q+k+v, gate/up, 64 launches a 9B step) load their
# first round of weights into registers before the PDL wait instead of asking its lines into L2, so that after the
# staging (~2 us) the first round is not one more L2 round trip on every block's chain (s41-run3's ncu of N1: 49% of
# the stall samples on the weights' loads, 39% on a round's first word). The same loads and operations in the same
# order: the same bits (the fused tests and the engine's GPU suite under it). 118 registers (N1 116), no spills; the
# 127 existing q4dp kernels byte-identical (text_cmp). Prediction: 9B +0.5-1.5%, 35B-A3B-8L +0.3-1%.
PACK=.gpu/s41c/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
TSC_Q4DP_N1PRE=1 timeout 150 $B/ts_test cuda.fused_products_dp4a cuda.addnorm_plain_same_bits > $O/t_fused_n1p.log 2>&1; tl "fused tests under N1P $?"
VN=(d p); VE=(X=0 TSC_Q4DP_N1PRE=1)
ab 9b $S/9b 3 --prompt 512 --gen 128 --runs 2
ab 35b8 $S/35b8 2 --prompt 512 --gen 128 --runs 2
abcb 9b 2 --shape 9b --mlx --digits 1
synth_shape 08b shapes/qwen3.5-0.8B.json
ab 08b $S/08b 1 --prompt 512 --gen 128 --runs 2
ab default models/default 1 --prompt 512 --gen 128 --runs 2
ab 9b_4k $S/9b 1 --prompt 4096 --gen 128 --runs 2
TSC_Q4DP_N1PRE=1 timeout 200 $B/ts_test cuda_engine > $O/t_engine_n1p.log 2>&1; tl "cuda_engine under N1P $?"
TSC_Q4DP_N1PRE=1 timeout 120 compute-sanitizer --tool memcheck $B/ts_test cuda.fused_products_dp4a > $O/cs_n1p_mem.log 2>&1; tl "memcheck fused N1P $?"
device_end
