#!/bin/bash
# session 27, device call 2, not run in session 27 (the device was paused): pack s27c = main's CUDA build at or
# after df2607a, the commit that made the one-pass normed staging with block 0's writes the default (its kernels'
# machine code is s27-run1's, text_cmp 103 same; the same through f1e3f50), bench/cuda/pack.sh s27c, with l2ahead
# (nvcc -O3 -std=c++17 -arch=sm_90 -o .gpu/s27c/l2ahead bench/cuda/l2ahead.cu) beside it: the whole GPU suite
# under the new default, then the figures of record against the two passes in the same binary (TSC_Q4DP_N1=0),
# interleaved: engine decode 9B / 35B-A3B-8L / default model (bench --prompt 512 --gen 128 --runs 2), MTP 3 at
# forced acceptance 0.8/0.6/0.5 on the 9B and the 35B-A3B-8L, cuda_bench 9B; then l2ahead. (Session 28: main's build
# since b32e11b also runs cuda_engine.logprobs_and_logit_bias, the GPU's log-probabilities and logit bias; no kernel
# changed.) Prediction: 9B ~495 tok/s
# (cuda_bench's one-row step 1.952-1.958 ms in s27-run1), 35B-A3B-8L ~1,840. (~260 s)
PACK=.gpu/s27c/pack.tar.xz . bench/cuda/device_env.sh
timeout 200 $B/ts_test cuda > $O/t_cuda.log 2>&1; tl "ts_test cuda $?"
timeout 300 $B/ts_test cuda_engine > $O/t_engine.log 2>&1; tl "ts_test cuda_engine $?"
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
for r in a b; do
  for f in 1 0; do
    bj 9b_n${f}_$r "TSC_Q4DP_N1=$f" $S/9b --prompt 512 --gen 128 --runs 2
    bj 35b8_n${f}_$r "TSC_Q4DP_N1=$f" $S/35b8 --prompt 512 --gen 128 --runs 2
    bj def_n${f}_$r "TSC_Q4DP_N1=$f" models/default --prompt 512 --gen 128 --runs 2
  done
done
for f in 1 0; do
  bj 9b_mtp3_n$f "TSC_Q4DP_N1=$f" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
  bj 35b8_mtp3_n$f "TSC_Q4DP_N1=$f" $S/35b8 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
done
for f in 1 0; do TSC_Q4DP_N1=$f $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b_n$f.txt 2>&1; tl "cb 9b n1=$f $?"; done
# (session 29) the verify passes' staging launches (s26-run3's trace: 129 k_stage_digits launches and their hops, ~450
# us of a 4-row 9B pass) against each block staging its rows itself, as measured before the one-pass normed staging
# (session 16: 4 rows 4.28 -> 3.25 ms with them): TSC_Q4DP_DIG's mask of the modes made once (1 plain, 2 norm, 4
# SwiGLU; default: SwiGLU always, the others from 2 rows). One binary, two rounds interleaved (~1 s a run).
for r in a b; do for d in 7 4 6 5; do TSC_Q4DP_DIG=$d $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b_dig${d}_$r.txt 2>&1; tl "cb 9b dig=$d $?"; done; done
# l2ahead (bench/cuda/l2ahead.cu, built on the host with nvcc -O3 -std=c++17 -arch=sm_90, carried beside the pack):
# whether the kernels between products can carry the next product's first MB into L2 for it (the chain of plain
# reads with latency kernels where the step has its GDN / attention / SwiGLU kernels)
cp .gpu/s27c/l2ahead /tmp/l2ahead && chmod +x /tmp/l2ahead && timeout 120 /tmp/l2ahead 0 > $O/l2ahead.txt 2>&1; tl "l2ahead $?"
device_end
