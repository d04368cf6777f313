#!/bin/bash
# session 32, device call 4. Pack s32d: main (s32-run3's tree) + the GDN step making out_proj's 8-bit digits
# (gdn.cu's gdn_digits, tsc_gdn_args.dg; the backend asks for them when out_proj would take digits made once:
# tsc_digits_group; the product takes them when no launch came between: stage_once). Removes a 9B step's 24
# k_stage_digits launches of out_proj (each ~0.9 us and a PDL hop) for one more cluster barrier in each GDN launch.
# TSC_GDN_DIG=0 gives the old path in the same binary (the same bits).
# make -j2 BUILD=build-cuda CUDA=1 WERROR=-Werror all, bench/cuda/pack.sh s32d. Carry .gpu/s32d
# (bench/cuda/slim.sh out-all s32-run4 first). Prediction: 9B -20..-35 us a token (+1-1.8% tok/s), the 0.8B and the
# default model +2-4%, 35B-A3B-8L +0.5-1% (6 GDN layers); a verify block -15..-30 us (its out_proj digits too).
PACK=.gpu/s32d/pack.tar.xz . bench/cuda/device_env.sh
timeout 120 $B/ts_test cuda.gdn_digits_same_as_staging cuda.gdn_step_parity_and_row_exact cuda.fused_products_dp4a > $O/t_kern.log 2>&1; tl "kernel tests $?"
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 3 $B/ts_test cuda.gdn_digits_same_as_staging > $O/memcheck.log 2>&1; tl "memcheck $?"
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
synth_shape 08b shapes/qwen3.5-0.8B.json
for r in a b c; do
  for v in d g0; do
    case $v in d) ev=X=0 ;; g0) ev=TSC_GDN_DIG=0 ;; esac
    bj 9b_${v}_$r "$ev" $S/9b --prompt 512 --gen 128 --runs 2
    bj 08b_${v}_$r "$ev" $S/08b --prompt 512 --gen 128 --runs 2
    bj def_${v}_$r "$ev" models/default --prompt 512 --gen 128 --runs 2
    bj 35b8_${v}_$r "$ev" $S/35b8 --prompt 512 --gen 128 --runs 2
  done
done
for r in a b; do
  for v in d g0; do
    case $v in d) ev=X=0 ;; g0) ev=TSC_GDN_DIG=0 ;; esac
    bj 9b_mtp3_${v}_$r "$ev" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
  done
done
timeout 240 $B/ts_test cuda_engine > $O/t_engine.log 2>&1; tl "ts_test cuda_engine $?"
device_end
