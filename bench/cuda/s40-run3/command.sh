#!/bin/bash
# session 40, device call 3 (pack s40a: the normal and trace builds of c6fea05, whose sources are this commit's): where a
# step's time goes at the defaults, for the next session (informational, nothing decided here). (1) The engine
# graphs of the 9B and 35B-A3B-8L traced (s39-run5, not run then): the attention's three kernels after EA and R1, the
# down's release after the SwiGLU staging with the carveout. (2) ncu with per-instruction stall sampling (SourceCounters;
# the source page with SASS) of the attention's prep / split / combine (the split: ~8.7 us a block for ~1 us of bytes,
# unexplained), the GDN step, and the normed one-row product (in_proj, gate/up: ~3 us a launch over their bytes in
# s38-run4, where the down, whose digits are made before it, loses ~0).
PACK=.gpu/s40a/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
TSC_TRACE_FILE=$O/te_9b.txt $B/turbospark_trace bench --backend cuda -m $S/9b --prompt 512 --gen 64 --runs 1 > $O/te_9b.log 2>&1; tl "trace 9b $?"
TSC_TRACE_FILE=$O/te_35b8.txt $B/turbospark_trace bench --backend cuda -m $S/35b8 --prompt 512 --gen 64 --runs 1 > $O/te_35b8.log 2>&1; tl "trace 35b8 $?"
SEC="--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats --section SourceCounters --section MemoryWorkloadAnalysis"
prof() { # NAME REGEX SKIP COUNT: ncu of the 9B's decode, the report, its details and its source page (SASS) as CSV
  local n=$1 re=$2 sk=$3 ct=$4
  timeout 150 ncu $SEC --import-source yes --kernel-name-base demangled --kernel-name "regex:$re" --launch-skip $sk --launch-count $ct \
    -o $O/ncu_$n $B/turbospark bench --backend cuda -m $S/9b --prompt 512 --gen 16 --runs 1 > $O/ncu_$n.log 2>&1; tl "ncu $n $?"
  ncu -i $O/ncu_$n.ncu-rep --page details --csv > $O/ncu_${n}_details.csv 2>>$O/ncu_$n.log; tl "details $n $?"
  ncu -i $O/ncu_$n.ncu-rep --page source --csv --print-source sass > $O/ncu_${n}_sass.csv 2>>$O/ncu_$n.log; tl "source $n $?"
}
prof attn 'k_attn_(prep|split_lk|combine)' 24 3
prof gdn 'k_gdn_fused' 48 1
prof norm 'k_q4dp<1, 1, 2, false, true' 100 2
prof down 'k_q4dp<1, 1, 2, true, false, true' 60 1
xz -T8 $O/te_*.txt $O/ncu_*_sass.csv $O/ncu_*_details.csv; tl "xz $?"
rm -f $O/ncu_*.ncu-rep
device_end
