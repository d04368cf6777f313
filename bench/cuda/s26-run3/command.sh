#!/bin/bash
# session 26, device call 3 (pack s26t: the trace build, EXTRA_NVCC_FLAGS=-DTSC_TRACE, of the same commit as s26a:
# turbospark and cuda_bench_trace): a timeline of every kernel of a decode step, never recorded before (session
# 19's trace had the products only): cuda_bench's 9B step at 1 and 4 rows (a decode step, a verify pass) and the
# 35B-A3B-8L step, and the engine's own decode graph (replay 40 of a bench run) on both shapes.
# bench/cuda/trace_view.py --kernels reads them. Then syncfloor. (~180 s)
PACK=.gpu/s26t/pack.tar.xz . bench/cuda/device_env.sh
CB="$B/cuda_bench_trace --mlx --digits 1"
$CB --shape 9b --trace $O/tr_9b_r1.txt > $O/cb_9b_r1.txt 2>&1; tl "cb trace 9b 1 row $?"
CB_TRACE_ROWS=4 $CB --shape 9b --trace $O/tr_9b_r4.txt > $O/cb_9b_r4.txt 2>&1; tl "cb trace 9b 4 rows $?"
$CB --shape 35b8 --trace $O/tr_35b8_r1.txt > $O/cb_35b8_r1.txt 2>&1; tl "cb trace 35b8 $?"
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
TSC_TRACE_FILE=$O/te_9b.txt $B/turbospark bench --backend cuda -m $S/9b --prompt 512 --gen 64 --runs 1 > $O/te_9b.log 2>&1; tl "engine trace 9b $?"
TSC_TRACE_FILE=$O/te_35b8.txt $B/turbospark bench --backend cuda -m $S/35b8 --prompt 512 --gen 64 --runs 1 > $O/te_35b8.log 2>&1; tl "engine trace 35b8 $?"
# syncfloor (bench/cuda/syncfloor.cu, built here with nvcc -O3 -std=c++17 -arch=sm_90, carried in .gpu/s26t): the
# products' bytes as a chain of plain reads under each ordering (graph, PDL, loads before the wait, one persistent
# kernel with grid barriers), at 1, 2 and 4 blocks an SM
cp .gpu/s26t/syncfloor /tmp/syncfloor && chmod +x /tmp/syncfloor
for b in 2 1 4; do timeout 60 /tmp/syncfloor 0 $b > $O/syncfloor_$b.txt 2>&1; tl "syncfloor $b $?"; done
xz -T8 $O/tr_*.txt $O/te_*.txt; tl "xz $?"
device_end
