#!/bin/bash
# NOT RUN: no device started for it (session 40); its A/B and probe ran in s40-run2 instead, without the traces.
# session 40, device call 1 (pack s40a: the normal and trace builds of this commit, plus bench/cuda/l2ahead.cu
# built alone): (1) the acceptance card's figures at the defaults against the forms of session 38's H200 call
# (TSC_ATTN_EARLY=0 TSC_ATTN_R1=0 TSC_CARVE=-1: the three defaults made since), interleaved; the 9B rows table
# (verify cost); (2) the engine graphs of the 9B and 35B-A3B-8L traced at the defaults (session 39's unrun
# s39-run5); (3) l2ahead with the striped prefetch (both+sA): whether the HBM idle during the kernels between
# products can carry each product block's first bytes into L2. Prediction for (3): both+s8..s16 0.05-0.15 ms under
# both (s30-run1's contiguous both+A: -0.027..+0.043 ms, which could not gain: see l2ahead.cu).
PACK=.gpu/s40a/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
VN=(d s0); VE=(X=0 "TSC_ATTN_EARLY=0 TSC_ATTN_R1=0 TSC_CARVE=-1")
ab 9b $S/9b 3 --prompt 512 --gen 128 --runs 2
ab 35b8 $S/35b8 2 --prompt 512 --gen 128 --runs 2
timeout 60 $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b.txt 2>&1; tl "cuda_bench 9b $?"
timeout 60 .gpu/s40a/l2ahead > $O/l2ahead.txt 2>&1; tl "l2ahead $?"
TSC_TRACE_FILE=$O/te_9b.txt $B/turbospark_trace bench --backend cuda -m $S/9b --prompt 512 --gen 64 --runs 1 > $O/te_9b.log 2>&1; tl "trace 9b $?"
TSC_TRACE_FILE=$O/te_35b8.txt $B/turbospark_trace bench --backend cuda -m $S/35b8 --prompt 512 --gen 64 --runs 1 > $O/te_35b8.log 2>&1; tl "trace 35b8 $?"
bj 9b_mtp3_d_a X=0 $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
bj 9b_4k_d_a X=0 $S/9b --prompt 4096 --gen 128 --runs 2
xz -T8 $O/te_*.txt; tl "xz $?"
device_end
