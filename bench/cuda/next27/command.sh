#!/bin/bash
# branch gpu-next (session 27, written after the device was paused; compiled with -Werror, not run on a GPU): L2
# ahead in the engine. With TSC_L2_AHEAD=MB the kernels between products ask the TMA unit
# (cp.async.bulk.prefetch.L2) for the next product's first MB while their latency chain runs and the HBM is idle:
# the GDN step (after its loads) for the layer's out_proj, the attention prep (at its end) for the o_proj, and
# k_stage_digits (before its PDL wait) for its own product (the down at one row; every product of a verify pass).
# The backend learns which product follows a GDN / attention op from the order of ops (backend.cu l2_learn /
# l2_next); cuda_bench passes the out_proj / o_proj itself. Off by default; a hint (no value depends on it). Run it
# after s27-run2 (whose l2ahead probe says whether the idea can pay) and merge the branch only if the tests pass.
# Pack: the branch's build as .gpu/NAME (bench/cuda/pack.sh NAME), PACK below set to it. Prediction, if l2ahead's
# both+16 gains: the 9B step -50..-100 us (out_proj and o_proj from L2, the down's first 8-16 MB), 35B-A3B-8L
# +1-3%; if the GDN's second round of loads queues behind the prefetch, a loss (then the prefetch belongs after
# the scan's loads, or only in the staging kernels). (~300 s)
PACK=.gpu/next27/pack.tar.xz . bench/cuda/device_env.sh
timeout 200 $B/ts_test cuda > $O/t_cuda.log 2>&1; tl "ts_test cuda $?"
timeout 300 $B/ts_test cuda_engine > $O/t_engine.log 2>&1; tl "ts_test cuda_engine $?"
TSC_L2_AHEAD=16 timeout 300 $B/ts_test cuda_engine > $O/t_engine_l2.log 2>&1; tl "ts_test cuda_engine l2 $?"
TSC_L2_AHEAD=16 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 $B/ts_test cuda_engine.parity_every_fixture_and_the_default_model > $O/memcheck_l2.log 2>&1; tl "memcheck l2 $?"
for r in a b; do
  for m in 0 8 16 32; do TSC_L2_AHEAD=$m $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b_l2_${m}_$r.txt 2>&1; tl "cb 9b l2=$m $?"; done
done
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
for r in a b; do
  for m in 0 16; do
    bj 9b_l2_${m}_$r "TSC_L2_AHEAD=$m" $S/9b --prompt 512 --gen 128 --runs 2
    bj 35b8_l2_${m}_$r "TSC_L2_AHEAD=$m" $S/35b8 --prompt 512 --gen 128 --runs 2
  done
done
for m in 0 16; do bj 9b_mtp3_l2_$m "TSC_L2_AHEAD=$m" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5; done
device_end
