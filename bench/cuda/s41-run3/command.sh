#!/bin/bash
# session 41, device call 3 (pack s41b, as call 2: the build of bac6e7b, whose sources are this commit's): the figures
# of record at the defaults on whatever card comes (the acceptance card is an H200: none came this session so far),
# and ncu with per-instruction stall sampling of the two one-row product forms of a 9B step, for the next session's
# reading with bench/cuda/ncu_sass.py (s40-run3's regular expressions matched nothing; ncu prints the template
# arguments as (int)1, (bool)0): N1, the normed product staging its row in every block (in_proj, q+k+v, gate/up:
# ~3 us a launch over its bytes), and DX + PRE, the product reading digits made before it (out_proj, o_proj, down).
PACK=.gpu/s41b/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
VN=(d); VE=(X=0)
ab 9b $S/9b 2 --prompt 512 --gen 128 --runs 2
ab 35b8 $S/35b8 2 --prompt 512 --gen 128 --runs 2
timeout 60 $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b.txt 2>&1; tl "cuda_bench 9b $?"
SEC="--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats --section SourceCounters --section MemoryWorkloadAnalysis"
prof() { # NAME REGEX SKIP COUNT: ncu of the 9B's decode, its details and its source page (SASS) as CSV
  local n=$1 re=$2 sk=$3 ct=$4
  timeout 120 ncu $SEC --import-source yes --kernel-name-base demangled --kernel-name "regex:$re" --launch-skip $sk --launch-count $ct \
    -o $O/ncu_$n $B/turbospark bench --backend cuda -m $S/9b --prompt 512 --gen 16 --runs 1 > $O/ncu_$n.log 2>&1; tl "ncu $n $?"
  ncu -i $O/ncu_$n.ncu-rep --page details --csv > $O/ncu_${n}_details.csv 2>>$O/ncu_$n.log; tl "details $n $?"
  ncu -i $O/ncu_$n.ncu-rep --page source --csv --print-source sass > $O/ncu_${n}_sass.csv 2>>$O/ncu_$n.log; tl "source $n $?"
}
prof n1 'k_q4dp<.int.1, .int.1, .int.2, .bool.0, .bool.1, .bool.0>' 100 2
prof dx 'k_q4dp<.int.1, .int.1, .int.2, .bool.1, .bool.0, .bool.1>' 100 2
xz -T8 $O/ncu_*_sass.csv $O/ncu_*_details.csv; tl "xz $?"
rm -f $O/ncu_*.ncu-rep
synth_shape 08b shapes/qwen3.5-0.8B.json
ab 08b $S/08b 1 --prompt 512 --gen 128 --runs 2
ab default models/default 1 --prompt 512 --gen 128 --runs 2
ab 9b_mtp3 $S/9b 1 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
synth_shape 35b shapes/qwen3.5-35B-A3B.json
ab 35b $S/35b 1 --prompt 512 --gen 128 --runs 2
device_end
