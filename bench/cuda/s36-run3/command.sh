#!/bin/bash
# session 36, device call 3 (pack s36c of this commit's tree): the several-row normed passes staged in the product's
# blocks (TSC_Q4DP_NB=N: passes of 2..N rows, k_q4dp_as's NB form, stage_norm_rows; off by default until measured)
# against the default (k_stage_digits' one-block-a-row launch, then the digits copied into each block).
# Build: make -j2 BUILD=build-cuda CUDA=1 WERROR=-Werror all; bench/cuda/pack.sh s36c;
# bench/cuda/slim.sh out-all s36-run3; carry .gpu/s36c.
# Floors and prediction. Session 26's H200 trace of a 9B 4-row verify: each of the 64 normed products (in_proj,
# q+k+v, gate+up) has a 5.2-5.7 us gap before it (k_stage_digits: 3.5-4.2 us after its release, two PDL hand-offs)
# and 1.4 us of copying the digits into its blocks; the one-row in-block staging is ~2.3 us (s27). Bytes: 4 rows of
# x + add = 128 KB from L2 a block, nothing from DRAM; the chain is latency: two chunks of 2 rows, each one L2
# round trip and one barrier (~0.8-1.2 us each). Prediction: ~-2.5..-3.5 us a normed product, -160..-220 us a
# 4-row pass (s36-run1's H100: 2.848-2.852 ms -> ~2.65 ms, 1.26x -> ~1.17x a step), 2 rows ~-100 us, 8 rows
# smaller or a loss (four chunks in sequence, registers: 32-56 bytes of spills in the 6..8-row instances);
# the one-row step unchanged (not touched: its kernels' machine code compared with text_cmp.py).
# s36-run2 (pack s36b) measured the first form: exact (cuda_engine 30/30 under NB=8, memcheck 0 errors) but 1.6x
# slower at 4 rows: block 0 wrote every row's outputs (x + add, the normed rows) before its products, re-reading x,
# add and the norm weights a word at a time from L2 (write_rows: ~6.5 us a row on the launch's tail). This call's
# form (s36c): every block writes its share of the outputs after its products (nb_outputs). Same prediction as above.
PACK=.gpu/s36c/pack.tar.xz . bench/cuda/device_env.sh
TSC_Q4DP_NB=8 timeout 90 $B/ts_test cuda.fused_products_dp4a cuda.graph_replay_same_bits > $O/t_nb.log 2>&1; tl "kernel tests under NB=8 $?"
TSC_Q4DP_NB=8 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 3 $B/ts_test cuda.fused_products_dp4a > $O/memcheck.log 2>&1; tl "memcheck $?"
synth_shape 9b shapes/qwen3.5-9B.json
for r in a b; do
  for v in d nb8 nb4; do
    case $v in d) ev=X=0 ;; nb8) ev=TSC_Q4DP_NB=8 ;; nb4) ev=TSC_Q4DP_NB=4 ;; esac
    env $ev timeout 30 $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b_${v}_$r.txt 2>&1; tl "cb 9b $v $r $?"
  done
done
for r in a b; do
  for v in d nb8; do
    case $v in d) ev=X=0 ;; nb8) ev=TSC_Q4DP_NB=8 ;; esac
    bj 9b_mtp3_${v}_$r "$ev" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
    bj def_mtp2_${v}_$r "$ev" models/default --prompt 512 --gen 256 --runs 2 --spec mtp --draft 2
  done
done
TSC_Q4DP_NB=8 timeout 120 $B/ts_test cuda_engine > $O/t_engine_nb.log 2>&1; tl "ts_test cuda_engine under NB=8 $?"
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
for v in d nb8; do
  case $v in d) ev=X=0 ;; nb8) ev=TSC_Q4DP_NB=8 ;; esac
  bj 35b8_mtp3_${v}_a "$ev" $S/35b8 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
  bj 9b_mtp7_${v}_a "$ev" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 7 --accept 0.95,0.9,0.85,0.8,0.7,0.6,0.5
done
TSC_Q4DP_NB=8 timeout 90 compute-sanitizer --tool racecheck --error-exitcode 3 $B/ts_test cuda.fused_products_dp4a > $O/racecheck.log 2>&1; tl "racecheck (last: a timeout keeps the rest) $?"
device_end
