#!/bin/bash
# NOT RUN (written for the next session; session 37's device time was spent): the timelines that session 36's
# s36-run5 asked for, plus the engine's 35B-A3B-8L decode graph with session 37's short MoE layer, to read what is
# left of a MoE layer's chain (the normed in_proj's two uneven rounds, the route, the down) before the next attempt.
# Build the trace build at HEAD: make -j2 BUILD=build-cuda-trace CUDA=1 EXTRA_NVCC_FLAGS=-DTSC_TRACE
# build-cuda-trace/cuda_bench build-cuda-trace/turbospark; bench/cuda/pack.sh s37t, then keep only b/cuda_bench_trace,
# b/turbospark_trace and b/lib in it (a full pack with both builds is over the 64 MiB with the tree);
# slim.sh out-all s37-run5; carry .gpu/s37t. bench/cuda/trace_view.py [--kernels] reads the files.
# No prediction: a measurement (the trace build runs ~3-5% slower than the shipped one).
PACK=.gpu/s37t/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
CB="$B/cuda_bench_trace --mlx --digits 1"
timeout 40 $CB --shape 9b --trace $O/tr_9b_r1.txt > $O/cb_9b_r1.txt 2>&1; tl "cb trace 9b 1 row $?"
CB_TRACE_ROWS=4 timeout 40 $CB --shape 9b --trace $O/tr_9b_r4.txt > $O/cb_9b_r4.txt 2>&1; tl "cb trace 9b 4 rows $?"
TSC_TRACE_FILE=$O/te_35b8.txt $B/turbospark_trace bench --backend cuda -m $S/35b8 --prompt 512 --gen 64 --runs 1 > $O/te_35b8.log 2>&1; tl "engine trace 35b8 $?"
TSC_MOE_SHGU=0 TSC_TRACE_FILE=$O/te_35b8_old.txt $B/turbospark_trace bench --backend cuda -m $S/35b8 --prompt 512 --gen 64 --runs 1 > $O/te_35b8_old.log 2>&1; tl "engine trace 35b8 old form $?"
xz -T8 $O/t*_*.txt; tl "xz $?"
device_end
