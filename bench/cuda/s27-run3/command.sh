#!/bin/bash
# session 27, device call 3, not run in session 27 (the device was paused); pack s27t: the trace build
# (make BUILD=build-cuda-trace CUDA=1 EXTRA_NVCC_FLAGS=-DTSC_TRACE) of s27-run2's tree, its cuda_bench as
# cuda_bench_trace and its turbospark as $B/turbospark, in b/ of a tar.xz (no other binaries: the size): every kernel of a step on a timeline with the one-pass
# normed staging, against s26-run3's (the two passes): cuda_bench's 9B step at 1 and 4 rows, the engine's own
# decode graph on the 9B and 35B-A3B-8L. bench/cuda/trace_view.py [--kernels] reads them. (~90 s)
PACK=.gpu/s27t/pack.tar.xz . bench/cuda/device_env.sh
CB="$B/cuda_bench_trace --mlx --digits 1"
$CB --shape 9b --trace $O/tr_9b_r1.txt > $O/cb_9b_r1.txt 2>&1; tl "cb trace 9b 1 row $?"
CB_TRACE_ROWS=4 $CB --shape 9b --trace $O/tr_9b_r4.txt > $O/cb_9b_r4.txt 2>&1; tl "cb trace 9b 4 rows $?"
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
TSC_TRACE_FILE=$O/te_9b.txt $B/turbospark bench --backend cuda -m $S/9b --prompt 512 --gen 64 --runs 1 > $O/te_9b.log 2>&1; tl "engine trace 9b $?"
TSC_TRACE_FILE=$O/te_35b8.txt $B/turbospark bench --backend cuda -m $S/35b8 --prompt 512 --gen 64 --runs 1 > $O/te_35b8.log 2>&1; tl "engine trace 35b8 $?"
xz -T8 $O/tr_*.txt $O/te_*.txt; tl "xz $?"
device_end
