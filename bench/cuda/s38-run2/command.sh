#!/bin/bash
# session 38, device call 2 (pack s38a of 0fb6a12, as call 1): why the GDN step is slow inside the graph. Call 1's
# traces: k_gdn_fused's blocks (clusters of 8) enter only after in_proj has ended (early 0.03-0.6 us, against 3-6 us
# for every kernel without clusters), their entries spread over 1.1-1.8 us, and they run 6-8.6 us for ~4 MB of state.
# (1) The two-kernel form (TSC_GDN_FUSED=0: k_gdn_prep without clusters, k_gdn_scan with clusters of 4) traced: if
# the prep enters early and the scan does not, cluster launches are what PDL does not start early.
# (2) ncu of k_gdn_fused (9B) and k_moe_route (35B-A3B-8L: 4.3 us a row on one warp in the trace): warp stalls.
PACK=.gpu/s38a/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
TSC_GDN_FUSED=0 TSC_TRACE_FILE=$O/te_9b_nf.txt $B/turbospark_trace bench --backend cuda -m $S/9b --prompt 512 --gen 64 --runs 1 > $O/te_9b_nf.log 2>&1; tl "trace 9b unfused $?"
TSC_GDN_FUSED=0 TSC_TRACE_FILE=$O/te_35b8_nf.txt $B/turbospark_trace bench --backend cuda -m $S/35b8 --prompt 512 --gen 64 --runs 1 > $O/te_35b8_nf.log 2>&1; tl "trace 35b8 unfused $?"
SEC="--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats --section SourceCounters"
timeout 120 ncu $SEC --kernel-name regex:k_moe_route --launch-skip 40 --launch-count 2 $B/turbospark bench --backend cuda -m $S/35b8 --prompt 16 --gen 16 --runs 1 > $O/ncu_route.txt 2>$O/ncu_route.err; tl "ncu route $?"
timeout 120 ncu $SEC --kernel-name regex:k_gdn_fused --launch-skip 60 --launch-count 2 $B/turbospark bench --backend cuda -m $S/9b --prompt 16 --gen 16 --runs 1 > $O/ncu_gdn.txt 2>$O/ncu_gdn.err; tl "ncu gdn $?"
xz -T8 $O/t*_*.txt; tl "xz $?"
device_end
