#!/bin/bash
# NOT RUN: refused ("too little device-machine time is left to start another machine", 164 s left). The next
# session's first call can run it as it is after rebuilding the trace build at its HEAD (the pack is ignored by git).
# session 36, device call 5 (pack s36t: the trace build, EXTRA_NVCC_FLAGS=-DTSC_TRACE, of this commit's tree, its
# cuda_bench_trace; the shipped kernels' machine code is s36a's): the timeline of every kernel of cuda_bench's 9B step
# at 1 and 4 rows at today's defaults (session 26's was the last, before N1, DX, the digits by GDN and attention,
# ROWPAR, GDN_PRE), for the next attempt at issue 17's 4-row verify. bench/cuda/trace_view.py [--kernels] reads them.
# Build: make -j2 BUILD=build-cuda-trace CUDA=1 EXTRA_NVCC_FLAGS=-DTSC_TRACE build-cuda-trace/cuda_bench
# build-cuda-trace/turbospark; bench/cuda/pack.sh s36t, then only b/cuda_bench_trace and b/lib kept in it (the full pack
# is 37 MB, over the 64 MiB with the tree); slim.sh out-all s36-run5.
# No prediction: a measurement (the trace build's step runs ~3-5% slower than the shipped one).
PACK=.gpu/s36t/pack.tar.xz . bench/cuda/device_env.sh
CB="$B/cuda_bench_trace --mlx --digits 1"
timeout 40 $CB --shape 9b --trace $O/tr_9b_r1.txt > $O/cb_9b_r1.txt 2>&1; tl "cb trace 9b 1 row $?"
CB_TRACE_ROWS=4 timeout 40 $CB --shape 9b --trace $O/tr_9b_r4.txt > $O/cb_9b_r4.txt 2>&1; tl "cb trace 9b 4 rows $?"
xz -T8 $O/tr_*.txt; tl "xz $?"
device_end
