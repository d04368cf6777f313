#!/bin/bash
# NOT RUN (session 40 had too little device time left to start it).
# session 40, device call 5 (pack s40d, as call 4; its sources differ from this commit's in comments only): figures of
# record at the defaults with GC (the 0.8B shape with and without it, the default model, the 40-layer 35B-A3B), and
# ncu of the normed one-row product (in_proj, gate/up) with call 3's regular expression mended (ncu prints the
# template arguments as (int)1, (bool)0), for the next session's reading of its in-block staging.
PACK=.gpu/s40d/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 08b shapes/qwen3.5-0.8B.json
VN=(d g0); VE=(X=0 TSC_ATTN_GC=0)
ab 08b $S/08b 1 --prompt 512 --gen 128 --runs 2
bj default_d_a X=0 models/default --prompt 512 --gen 128 --runs 2
SEC="--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats --section SourceCounters --section MemoryWorkloadAnalysis"
timeout 100 ncu $SEC --kernel-name-base demangled --kernel-name 'regex:k_q4dp<.int.1, .int.1, .int.2, .bool.0, .bool.1' --launch-skip 100 --launch-count 2 \
  -o $O/ncu_norm $B/turbospark bench --backend cuda -m $S/9b --prompt 512 --gen 16 --runs 1 > $O/ncu_norm.log 2>&1; tl "ncu norm $?"
ncu -i $O/ncu_norm.ncu-rep --page details --csv > $O/ncu_norm_details.csv 2>>$O/ncu_norm.log; tl "details $?"
ncu -i $O/ncu_norm.ncu-rep --page source --csv --print-source sass > $O/ncu_norm_sass.csv 2>>$O/ncu_norm.log; tl "source $?"
rm -f $O/ncu_norm.ncu-rep; xz -T8 $O/ncu_*.csv
synth_shape 35b shapes/qwen3.5-35B-A3B.json
bj 35b_d_a X=0 $S/35b --prompt 512 --gen 128 --runs 2
device_end
