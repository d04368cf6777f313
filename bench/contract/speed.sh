#!/bin/sh
# speed.sh: CPU speed of this tree against the pre-refactor build, interleaved
# (old, new, old, new, ...) so that load on a shared machine hits both alike.
# Prints each run's decode and prefill tok/s and the medians.
# usage: bench/contract/speed.sh [MODEL_DIR] [ROUNDS] [BASE_DIR]
M=${1:-models/default}; R=${2:-5}; BASE=${3:-/work/base}
T=$(mktemp -d)
for i in $(seq 1 "$R"); do
  for side in old new; do
    bin=build/turbospark; [ $side = old ] && bin=$BASE/build/turbospark
    $bin bench -m "$M" --runs 1 --prompt 128 --gen 64 2>/dev/null >"$T/out"
    d=$(awk '/^decode/ {print $4}' "$T/out"); p=$(awk '/^prefill/ {print $4}' "$T/out")
    echo "$side decode $d prefill $p"; echo "$d" >>"$T/$side.d"; echo "$p" >>"$T/$side.p"
  done
done
med() { sort -n "$1" | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2), "(min", a[1] ", max", a[NR] ")"}'; }
for side in old new; do echo "$side: decode median $(med $T/$side.d) prefill median $(med $T/$side.p)"; done
rm -rf "$T"
