#!/bin/bash
# session 38, device call 6 (pack s38e: the normal build of this commit): (1) k_attn_split_lk's PRE
# (TSC_ATTN_PRE=1, opt-in): the block's first sub-chunk of older keys and values loaded into shared memory before
# the PDL wait. s38-run4's trace (9B, H100, T 512): the split's blocks resident ~3.7 us before their release, then
# 8.5-8.7 us each, their first loads (64 KB a block from DRAM) on the chain. Prediction: -1..-2 us an attention
# layer, 9B +0.4-0.8%, 35B-A3B-8L +0.1-0.2%. Tests: the attention tests and the engine suite under PRE, memcheck.
# (2) The final tree's figures at its defaults (route network, GDN H and B): the kernel suite, the 9B, 35B-A3B-8L, the
# 40-layer 35B-A3B, 0.8B, the default model, MTP 3 at forced acceptance, cuda_bench's rows table.
PACK=.gpu/s38e/pack.tar.xz . bench/cuda/device_env.sh
AT="cuda.attn_digits_same_as_staging cuda.attn_short_parity_and_row_exact cuda.attn_device_pos_big_pieces cuda.attn_same_pos_rows cuda.attn_pieces_by_row_length cuda.attn_long_split_parity_and_row_exact"
TSC_ATTN_PRE=1 timeout 120 $B/ts_test $AT > $O/t_attn_pre.log 2>&1; tl "attn tests under PRE $?"
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
VN=(d ap); VE=(X=0 TSC_ATTN_PRE=1)
ab 9b $S/9b 3 --prompt 512 --gen 128 --runs 2
ab 35b8 $S/35b8 2 --prompt 512 --gen 128 --runs 2
ab 9b_c4k $S/9b 1 --prompt 512 --gen 128 --runs 2 --ctx 4096
ab 9b_mtp3 $S/9b 1 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
TSC_ATTN_PRE=1 timeout 150 $B/ts_test cuda_engine > $O/t_engine_ap.log 2>&1; tl "cuda_engine under PRE $?"
TSC_ATTN_PRE=1 timeout 60 compute-sanitizer --tool memcheck $B/ts_test cuda.attn_short_parity_and_row_exact > $O/cs_attn.log 2>&1; tl "memcheck attn PRE $?"
timeout 200 $B/ts_test cuda > $O/t_cuda.log 2>&1; tl "ts_test cuda $?"
bj 35b8_mtp3_d_a X=0 $S/35b8 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
synth_shape 08b shapes/qwen3.5-0.8B.json
bj 08b_d_a X=0 $S/08b --prompt 512 --gen 128 --runs 2
bj def_d_a X=0 models/default --prompt 512 --gen 128 --runs 2
timeout 60 $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b.txt 2>&1; tl "cuda_bench 9b $?"
synth_shape 35b shapes/qwen3.5-35B-A3B.json
bj 35b_d_a X=0 $S/35b --prompt 512 --gen 128 --runs 2
device_end
