#!/bin/bash
# session 36, device call 4 (pack s36d of this commit's tree): k_q4dp_as's DX form (TSC_Q4DP_ASDX=1, opt-in): a
# several-row pass reads the digits k_stage_digits made where they lie (each step's asked into L1 one step ahead)
# instead of copying them into every block's shared memory after the PDL wait.
# Build: make -j2 BUILD=build-cuda CUDA=1 WERROR=-Werror all; bench/cuda/pack.sh s36d;
# bench/cuda/slim.sh out-all s36-run4; carry .gpu/s36d.
# Floors and prediction. The copy is 20 KB a block for a 4-row normed or plain pass of 4096 columns (5 MB over 264
# blocks from L2), 50 KB for a 4-row SwiGLU down (13 MB); session 26's H200 trace has it at 1.4 / 1.9 / 3.4-3.7 us
# after the release, on the critical path. DX moves those bytes into the streaming (from L1 after the first warp;
# per step a lane reads 4 x 40 bytes of digits against 64 of weights, within L1's rate). Prediction: -1..-3 us a
# product at 4 rows, the 4-row step -130..-250 us (H100 2.85 -> ~2.6-2.7 ms, 1.26x -> ~1.16-1.19x); 2 rows about
# half that; 8-16 rows less or a loss (their digits 2-4x the weights' bytes a step); one row untouched.
PACK=.gpu/s36d/pack.tar.xz . bench/cuda/device_env.sh
X1=TSC_Q4DP_ASDX=1
env $X1 timeout 30 $B/ts_test cuda.fused_products_dp4a cuda.graph_replay_same_bits > $O/t_dx.log 2>&1; tl "kernel tests under ASDX $?"
env $X1 timeout 30 compute-sanitizer --tool memcheck --error-exitcode 3 $B/ts_test cuda.fused_products_dp4a > $O/memcheck.log 2>&1; tl "memcheck $?"
synth_shape 9b shapes/qwen3.5-9B.json
for r in a b; do
  for v in d dx; do
    case $v in d) ev=X=0 ;; dx) ev=$X1 ;; esac
    env $ev timeout 30 $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b_${v}_$r.txt 2>&1; tl "cb 9b $v $r $?"
  done
done
for r in a b; do
  for v in d dx; do
    case $v in d) ev=X=0 ;; dx) ev=$X1 ;; esac
    bj 9b_mtp3_${v}_$r "$ev" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
    bj def_mtp2_${v}_$r "$ev" models/default --prompt 512 --gen 256 --runs 2 --spec mtp --draft 2
  done
done
env $X1 timeout 100 $B/ts_test cuda_engine > $O/t_engine_dx.log 2>&1; tl "ts_test cuda_engine under ASDX $?"
env $X1 timeout 80 $B/ts_test cuda.linear_parity_and_row_exact > $O/t_rows_dx.log 2>&1; tl "row-exact products under ASDX (last) $?"
device_end
