#!/bin/bash
# session 27, device call 1 (pack s27b: branch s27b): the normed one-row products' staging in one pass
# (q4dp_impl.cuh stage_norm_words: x and add read once, the sum of squares from the staging's own registers in
# row_ss8's order, the norm weights loaded before the PDL wait, the outputs written from registers) and
# k_stage_digits' norm passes the same way; the row sum's order is now the staging's words (row_ss8) everywhere,
# tsc_add_rmsnorm included, so fused = unfused bit for bit still. One binary, the forms by TSC_Q4DP_N1 (bits
# equal): 0 the two passes as before, 1 one pass with block 0 writing the outputs after every block has staged,
# 2 (the default) one pass with the last block to stage writing them (nobody waits). Tests first (the whole GPU
# suite under the default, the fused products under every form and with every mode's digits made once,
# memcheck, racecheck), then the forms interleaved: cuda_bench 9B and 35B-A3B-8L (1..16 rows), engine decode 9B /
# 35B-A3B-8L, MTP 3 at forced acceptance on the 9B, the default model. Prediction: a normed one-row staging 3.6 ->
# ~2.6 us, 64 a 9B step: 2.02 -> ~1.96 ms (9B ~477 -> ~490 tok/s); form 2 another ~0.5 us off each normed launch's
# tail; 35B-A3B-8L +1-2%; a 4-row verify -0.5..-1%. (~330 s)
PACK=.gpu/s27b/pack.tar.xz . bench/cuda/device_env.sh
timeout 200 $B/ts_test cuda > $O/t_cuda.log 2>&1; tl "ts_test cuda $?"
for f in 0 1; do TSC_Q4DP_N1=$f timeout 60 $B/ts_test cuda.fused_products_dp4a cuda.norm_silu_parity > $O/t_fused_n$f.log 2>&1; tl "fused n1=$f $?"; done
TSC_Q4DP_DIG=7 timeout 60 $B/ts_test cuda.fused_products_dp4a > $O/t_fused_d7.log 2>&1; tl "fused dig7 $?"
timeout 300 $B/ts_test cuda_engine > $O/t_engine.log 2>&1; tl "ts_test cuda_engine $?"
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 3 $B/ts_test cuda.fused_products_dp4a cuda.norm_silu_parity > $O/memcheck.log 2>&1; tl "memcheck $?"
timeout 100 compute-sanitizer --tool racecheck --error-exitcode 3 $B/ts_test cuda.norm_silu_parity cuda.fused_products_dp4a > $O/racecheck.log 2>&1; tl "racecheck $?"
for r in a b; do
  for f in 0 1 2; do TSC_Q4DP_N1=$f $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b_n${f}_$r.txt 2>&1; tl "cb 9b n1=$f $?"; done
done
for f in 0 2; do TSC_Q4DP_N1=$f $B/cuda_bench --shape 35b8 --mlx --digits 1 > $O/cb_35b8_n$f.txt 2>&1; tl "cb 35b8 n1=$f $?"; done
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
for r in a b; do
  for f in 0 2; do
    bj 9b_n${f}_$r "TSC_Q4DP_N1=$f" $S/9b --prompt 512 --gen 128 --runs 2
    bj 35b8_n${f}_$r "TSC_Q4DP_N1=$f" $S/35b8 --prompt 512 --gen 128 --runs 2
  done
done
for f in 0 2; do bj 9b_mtp3_n$f "TSC_Q4DP_N1=$f" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5; done
bj def_n2 "X=1" models/default --prompt 512 --gen 128 --runs 2
bj 35b8_mtp3_n2 "X=1" $S/35b8 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
device_end
