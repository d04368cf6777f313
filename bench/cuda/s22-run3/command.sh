#!/bin/bash
# session 22, device call 3: 5..7-row passes of the 4-bit products in one pass (k_q4dp / k_q4dp_as at NR = 5, 6, 7;
# they went as a pass of 4 rows and another, reading every weight twice: call 2's cuda_bench 9B step 4 rows 1.46x,
# 5 rows 2.29x, 6 rows 2.54x). Prediction: 5 rows ~1.65x, 6 ~1.85x, 7 ~2.0x; the 9B MTP 4 at 0.8/0.6/0.5/0.4
# 557 -> ~800 tok/s. Tests first (linear_parity_and_row_exact now checks 5-, 6- and 7-row calls bit for bit).
PACK=.gpu/s22c/pack.tar.xz . bench/cuda/device_env.sh
timeout 100 $B/ts_test cuda > $O/kern.log 2>&1; tl "ts_test cuda $?"
$B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b.txt 2>&1; tl "cb 9b $?"
synth_shape 9b shapes/qwen3.5-9B.json
bj 9b_acc1 "X=1" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 1 --accept 0.8
bj 9b_acc2 "X=1" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 2 --accept 0.8,0.6
bj 9b_acc3 "X=1" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
bj 9b_acc4 "X=1" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 4 --accept 0.8,0.6,0.5,0.4
bj 9b_acc5 "X=1" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 5 --accept 0.8,0.6,0.5,0.4,0.3
bj def_df8 "X=1" models/default --prompt 64 --gen 256 --runs 2 --spec dflash --block 8 --ids-file tools/train/heldout.ids
timeout 150 $B/ts_test cuda_engine > $O/eng.log 2>&1; tl "ts_test cuda_engine $?"
device_end
