#!/bin/bash
# session 38, device call 1 (pack s38a of 0fb6a12: the normal build and the trace build): (1) the tests session 37's
# review refactored (fz_case) on a GPU for the first time; (2) session 37's unrun s37-run5: the 9B step's timeline at
# 1 and 4 rows (cuda_bench_trace) and the engine's 35B-A3B-8L graph with and without the short MoE layer
# (turbospark_trace, TSC_TRACE_FILE); (3) the session's baseline (9B, 35B-A3B-8L) from the normal build.
# No prediction: measurements (the trace build runs ~3-5% slower than the shipped one).
PACK=.gpu/s38a/pack.tar.xz . bench/cuda/device_env.sh
timeout 120 $B/ts_test cuda.addnorm_plain_same_bits cuda.fused_products_dp4a > $O/t_fz.log 2>&1; tl "fz tests $?"
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
CB="$B/cuda_bench_trace --mlx --digits 1"
timeout 40 $CB --shape 9b --trace $O/tr_9b_r1.txt > $O/cb_9b_r1.txt 2>&1; tl "cb trace 9b 1 row $?"
CB_TRACE_ROWS=4 timeout 40 $CB --shape 9b --trace $O/tr_9b_r4.txt > $O/cb_9b_r4.txt 2>&1; tl "cb trace 9b 4 rows $?"
TSC_TRACE_FILE=$O/te_35b8.txt $B/turbospark_trace bench --backend cuda -m $S/35b8 --prompt 512 --gen 64 --runs 1 > $O/te_35b8.log 2>&1; tl "engine trace 35b8 $?"
TSC_MOE_SHGU=0 TSC_TRACE_FILE=$O/te_35b8_old.txt $B/turbospark_trace bench --backend cuda -m $S/35b8 --prompt 512 --gen 64 --runs 1 > $O/te_35b8_old.log 2>&1; tl "engine trace 35b8 old form $?"
TSC_TRACE_FILE=$O/te_9b.txt $B/turbospark_trace bench --backend cuda -m $S/9b --prompt 512 --gen 64 --runs 1 > $O/te_9b.log 2>&1; tl "engine trace 9b $?"
bj 9b_d_a X=0 $S/9b --prompt 512 --gen 128 --runs 2
bj 35b8_d_a X=0 $S/35b8 --prompt 512 --gen 128 --runs 2
xz -T8 $O/t*_*.txt; tl "xz $?"
device_end
