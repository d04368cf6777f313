#!/bin/bash
# session 27, device call 1 (pack s27a: branch s27's first commit): the normed
# one-row products' staging in one pass (q4dp_impl.cuh stage_norm_words: x and add read once, the sum of squares
# from the staging's own registers in row_ss8's order, the norm weights loaded before the PDL wait, the outputs
# written from registers) and k_stage_digits' norm passes the same way; the row sum's order is now the staging's
# words (row_ss8) everywhere, tsc_add_rmsnorm included, so fused = unfused bit for bit still. Tests first (the
# whole GPU suite, the fused products with every mode's digits made once, memcheck), then cuda_bench 9B and
# 35B-A3B-8L (1..16 rows), engine decode 9B / 35B-A3B-8L / default model, MTP 3 at forced acceptance on the 9B, to
# set against session 26's figures of the same commands on this kind (s26-run2: the pack with the reference
# binaries beside did not fit the 64 MiB a call carries). Prediction: a normed one-row staging 3.6 -> ~2.6 us, 64 a 9B step: 2.02 -> ~1.96 ms
# (9B ~477 -> ~490 tok/s); 35B-A3B-8L +1-2%; a 4-row verify -0.5..-1%. (~300 s)
PACK=.gpu/s27a/pack.tar.xz . bench/cuda/device_env.sh
timeout 200 $B/ts_test cuda > $O/t_cuda.log 2>&1; tl "ts_test cuda $?"
TSC_Q4DP_DIG=7 timeout 60 $B/ts_test cuda.fused_products_dp4a > $O/t_fused_d7.log 2>&1; tl "fused dig7 $?"
timeout 300 $B/ts_test cuda_engine > $O/t_engine.log 2>&1; tl "ts_test cuda_engine $?"
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 3 $B/ts_test cuda.fused_products_dp4a cuda.norm_silu_parity > $O/memcheck.log 2>&1; tl "memcheck $?"
timeout 90 compute-sanitizer --tool racecheck --error-exitcode 3 $B/ts_test cuda.norm_silu_parity > $O/racecheck.log 2>&1; tl "racecheck $?"
for r in a b; do
  $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b_$r.txt 2>&1; tl "cb 9b $?"
  $B/cuda_bench --shape 35b8 --mlx --digits 1 > $O/cb_35b8_$r.txt 2>&1; tl "cb 35b8 $?"
done
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
for r in a b; do
  bj 9b_dec_$r "X=1" $S/9b --prompt 512 --gen 128 --runs 2
  bj 35b8_dec_$r "X=1" $S/35b8 --prompt 512 --gen 128 --runs 2
  bj def_dec_$r "X=1" models/default --prompt 512 --gen 128 --runs 2
done
bj 9b_mtp3 "X=1" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
bj 35b8_mtp3 "X=1" $S/35b8 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
device_end
