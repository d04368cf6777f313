#!/bin/bash
# session 26, device call 4 (pack s26b): k_stage_digits' XS form for norm passes (the several-row verify passes'
# normed staging without L2 reads in its loop; TSC_STAGE_XS=0 the form before, same binary). Prediction from the
# s26-run3 4-row trace: a normed stage 3.5-4.2 -> ~2.8 us, 64 a 9B verify pass: the 4-row step 2.96 -> ~2.90 ms
# (1.47 -> ~1.44x a step), the one-row step unchanged. Tests first (the fused products bit for bit against the
# unfused kernels at 3/5/16 rows take the new form; the engine's verify passes against decode), memcheck, then
# cuda_bench and the engine's MTP 3 at forced acceptance, interleaved. (~240 s)
PACK=.gpu/s26b/pack.tar.xz . bench/cuda/device_env.sh
timeout 150 $B/ts_test cuda > $O/t_cuda.log 2>&1; tl "ts_test cuda $?"
timeout 200 $B/ts_test cuda_engine > $O/t_engine.log 2>&1; tl "ts_test cuda_engine $?"
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 3 $B/ts_test cuda.fused_products_dp4a > $O/memcheck.log 2>&1; tl "memcheck $?"
CB="$B/cuda_bench --shape 9b --mlx --digits 1"
for r in a b; do
  $CB > $O/cb_xs_$r.txt 2>&1; tl "cb xs $?"
  TSC_STAGE_XS=0 $CB > $O/cb_old_$r.txt 2>&1; tl "cb old $?"
done
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
for r in a b; do
  bj 9b_mtp3_xs_$r "X=1" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
  bj 9b_mtp3_old_$r "TSC_STAGE_XS=0" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
done
bj 35b8_mtp3_xs "X=1" $S/35b8 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
bj 35b8_mtp3_old "TSC_STAGE_XS=0" $S/35b8 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
bj 9b_dec_xs "X=1" $S/9b --prompt 512 --gen 128 --runs 2
device_end
