#!/bin/bash
# session 24, device call 1: (1) the group numerics' 2..4-row passes on k_q4g (dp4a, each weight word unpacked once
# for all rows) instead of k_q4gm (TSC_Q4G_DP=1 the old routing, one binary); prediction: at 2 rows ~1.10-1.15x one
# row (k_q4gm 1.32x), 4 rows ~1.4x (k_q4gm 1.41x), MTP 1 and 3 under TSC_Q4G=1 up to k_q4dp's. (2) TSC_Q4DP_AS1=3:
# the one-row passes whose digits are made once (the 9B's SwiGLU downs) on k_q4dp_as's ring; prediction: the down
# 13.1 -> ~11.5 us, the step -40..-50 us. (3) k_q4g's rows a warp forced 1/2/4 at one row (where its one-row step
# loses ~35 us to k_q4dp's). Tests first (the row-exact calls of 2..7 rows cover the new kernels). (~330 s)
PACK=.gpu/s24a/pack.tar.xz . bench/cuda/device_env.sh
timeout 200 $B/ts_test cuda.linear_parity_and_row_exact cuda.fused_products_dp4a > $O/kern.log 2>&1; tl "ts_test products $?"
CB="$B/cuda_bench --shape 9b --mlx --digits 1"
for r in a b; do
  $CB > $O/cb_def_$r.txt 2>&1; tl "cb def $?"
  TSC_Q4DP_AS1=3 $CB > $O/cb_as13_$r.txt 2>&1; tl "cb as1=3 $?"
  TSC_Q4G=1 $CB > $O/cb_grp_$r.txt 2>&1; tl "cb grp $?"
  TSC_Q4G=1 TSC_Q4G_DP=1 $CB > $O/cb_grpmm_$r.txt 2>&1; tl "cb grp dp=1 $?"
done
for rg in 1 2 4; do TSC_Q4G=1 TSC_Q4G_RG=$rg $CB > $O/cb_grp_rg$rg.txt 2>&1; tl "cb grp rg $rg $?"; done
synth_shape 9b shapes/qwen3.5-9B.json
for r in a b; do
  bj 9b_dec_c_$r "X=1" $S/9b --prompt 512 --gen 128 --runs 2
  bj 9b_dec_as_$r "TSC_Q4DP_AS1=3" $S/9b --prompt 512 --gen 128 --runs 2
  bj 9b_dec_g_$r "TSC_Q4G=1" $S/9b --prompt 512 --gen 128 --runs 2
done
for d in 1 3 7; do
  case $d in 1) acc=0.8;; 3) acc=0.8,0.6,0.5;; 7) acc=0.95,0.9,0.85,0.8,0.7,0.6,0.5;; esac
  bj 9b_acc${d}_c "X=1" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft $d --accept $acc
  bj 9b_acc${d}_g "TSC_Q4G=1" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft $d --accept $acc
  [ $d = 7 ] || bj 9b_acc${d}_gmm "TSC_Q4G=1 TSC_Q4G_DP=1" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft $d --accept $acc
done
TSC_Q4G=1 timeout 150 $B/ts_test cuda_engine > $O/eng_grp.log 2>&1; tl "ts_test cuda_engine (grp) $?"
device_end
