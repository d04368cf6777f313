#!/bin/bash
# session 36, device call 1 (pack s36a of this commit's tree: session 35's unrun s35-run3 plus what costs no build):
# the kernel suite and the engine's GPU suite at the committed defaults (TSC_ATTN_DIG and TSC_GDN_PRE made the
# defaults in session 35 after being validated only through their switches), the decode figures at those defaults
# on every shape, and two verify measurements that need no new code: the several-row normed passes staged in the
# product's blocks instead of by one k_stage_digits launch (TSC_Q4DP_DIG=5: plain and SwiGLU once, norm per block;
# the one-row passes are the same either way), and the group numerics (TSC_Q4G=1) against the defaults on the
# rows table. Build: make -j2 BUILD=build-cuda CUDA=1 WERROR=-Werror all; bench/cuda/pack.sh s36a;
# bench/cuda/slim.sh out-all s36-run1; carry .gpu/s36a.
# Predictions: cuda 28/28-ish and cuda_engine 30/30 (as under the switches in s35-run2); decode as s35-run2's "new"
# column on an H100 (9B ~440 tok/s) or s35-run1 + ~1% on an H200 (9B ~529); TSC_Q4DP_DIG=5: 4-row step within +-2%
# of the default (session 16 measured per-block staging of all modes at 4 rows 1.32x slower, but that was the
# two-pass normed staging and the plain and SwiGLU ones too; the 4-row pass's 64 normed launches are ~3.5-4.2 us each
# in session 26's trace against per-block one-pass staging of 4 rows that is ~2.5-3 us on the chain).
PACK=.gpu/s36a/pack.tar.xz . bench/cuda/device_env.sh
timeout 100 $B/ts_test cuda_engine > $O/t_engine.log 2>&1; tl "ts_test cuda_engine $?"
timeout 100 $B/ts_test cuda > $O/t_cuda.log 2>&1; tl "ts_test cuda $?"
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
synth_shape 08b shapes/qwen3.5-0.8B.json
for r in a b; do
  bj 9b_d_$r X=0 $S/9b --prompt 512 --gen 128 --runs 2
  bj 08b_d_$r X=0 $S/08b --prompt 512 --gen 128 --runs 2
  bj def_d_$r X=0 models/default --prompt 512 --gen 128 --runs 2
  bj 35b8_d_$r X=0 $S/35b8 --prompt 512 --gen 128 --runs 2
done
for r in a b; do
  for v in d dig5; do
    case $v in d) ev=X=0 ;; dig5) ev=TSC_Q4DP_DIG=5 ;; esac
    env $ev timeout 30 $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b_${v}_$r.txt 2>&1; tl "cb 9b $v $r $?"
  done
done
env TSC_Q4G=1 timeout 30 $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b_q4g_a.txt 2>&1; tl "cb 9b q4g $?"
for v in d dig5; do
  case $v in d) ev=X=0 ;; dig5) ev=TSC_Q4DP_DIG=5 ;; esac
  bj 9b_mtp3_${v}_a "$ev" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
done
device_end
