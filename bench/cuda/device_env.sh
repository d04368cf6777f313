# device_env.sh: the common start of a device call's command.sh (sourced from
# the repository root on the GPU host): unpack the carried binaries, set the
# environment, start the timeline. Usage, in command.sh:
#   PACK=.gpu/s13/pack.tar.xz . bench/cuda/device_env.sh
# Then: $B (the binaries: turbospark, ts_test, cuda_bench; their libraries in
# $B/lib), $O (results, tarred to $OUT/r.tgz by device_end), tl "what" (a
# timeline line), synth_shape NAME SHAPE_FILE (an INT4 g64 install under $S),
# bj NAME ENV MODEL [bench args] (turbospark bench --backend cuda --json into
# $O/e_NAME.json). The pack is made here by bench/cuda/pack.sh NAME.
O=$OUT/x; mkdir -p "$O"; T0=$(date +%s)
tl() { echo "$(( $(date +%s) - T0 )) s: $*" >> "$O/timeline.txt"; }
tar -C /tmp -xJf "$PACK"; B=/tmp/b
export LD_LIBRARY_PATH=$B/lib TS_BIN=$B/turbospark NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
S=/tmp/syn; mkdir -p $S
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit,temperature.gpu --format=csv > "$O/smi.txt" 2>&1
synth_shape() { [ -d "$S/$1" ] || $B/turbospark synth --shape "$2" --out "$S/$1" --bits 4 --quiet; tl "synth $1 $?"; }
# (an ENV holding the word REF=1 runs $B/turbospark_ref, pack.sh's reference build, for an A/B of two builds)
bj() {
  local n=$1 ev=$2 m=$3 exe=turbospark; shift 3
  case " $ev " in *" REF=1 "*) exe=turbospark_ref ;; esac
  env $ev $B/$exe bench --backend cuda -m "$m" --json "$@" > "$O/e_$n.json" 2>>"$O/e_err.log"; tl "e_$n rc $?"
}
# ab NAME MODEL ROUNDS [bench args]: bj NAME_V_R for ROUNDS rounds (R = a, b, ...) and, inside each round, every
# variant V of the caller's arrays VN (names) and VE (environments; X=0 for none), interleaved, so that an A/B of a
# call is one line: VN=(d new); VE=(X=0 "TSC_A=1 TSC_B=1"); ab 9b $S/9b 2 --prompt 512 --gen 128 --runs 2
ab() {
  local n=$1 m=$2 k=$3 r i; shift 3
  for r in $(printf '%s\n' a b c d e f | head -n "$k"); do
    for i in "${!VN[@]}"; do bj "${n}_${VN[$i]}_$r" "${VE[$i]}" "$m" "$@"; done
  done
}
# abcb NAME ROUNDS [cuda_bench args]: the same for cuda_bench (its output in $O/cb_NAME_V_R.txt)
abcb() {
  local n=$1 k=$2 r i; shift 2
  for r in $(printf '%s\n' a b c d e f | head -n "$k"); do
    for i in "${!VN[@]}"; do
      env ${VE[$i]} timeout 60 $B/cuda_bench "$@" > "$O/cb_${n}_${VN[$i]}_$r.txt" 2>&1; tl "cb_${n}_${VN[$i]}_$r rc $?"
    done
  done
}
# prof NAME REGEX SKIP COUNT [MODEL]: ncu with per-instruction stall sampling of the matching kernels of a short
# decode (MODEL, default $S/9b), its details and its source page (SASS) as CSV in $O (read with bench/cuda/
# ncu_sass.py); the report itself is not kept. REGEX matches ncu's demangled names, which print template arguments
# as (int)1, (bool)0. (s40-run3 and s41-run3 each defined this themselves.)
prof() {
  local n=$1 re=$2 sk=$3 ct=$4 m=${5:-$S/9b}
  timeout 150 ncu --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
    --section SchedulerStats --section SourceCounters --section MemoryWorkloadAnalysis --import-source yes \
    --kernel-name-base demangled --kernel-name "regex:$re" --launch-skip "$sk" --launch-count "$ct" \
    -o "$O/ncu_$n" $B/turbospark bench --backend cuda -m "$m" --prompt 512 --gen 16 --runs 1 > "$O/ncu_$n.log" 2>&1; tl "ncu $n $?"
  ncu -i "$O/ncu_$n.ncu-rep" --page details --csv > "$O/ncu_${n}_details.csv" 2>>"$O/ncu_$n.log"; tl "details $n $?"
  ncu -i "$O/ncu_$n.ncu-rep" --page source --csv --print-source sass > "$O/ncu_${n}_sass.csv" 2>>"$O/ncu_$n.log"; tl "source $n $?"
  xz -T8 "$O/ncu_${n}_details.csv" "$O/ncu_${n}_sass.csv"; rm -f "$O/ncu_$n.ncu-rep"
}
# card: the acceptance card's figures at the defaults, on whatever card comes (issues 16 and 17: the 9B and the
# 35B-A3B-8L decode, two rounds; cuda_bench's 9B steps of 1..16 rows, whose 4-row ratio is the verify target; MTP 3
# at forced acceptance on both). Written once here: s41-run3, s41-run5 and s43-run1 each repeated these lines.
# card_decode and card_mtp: its engine runs for each of the caller's variants VN / VE (an A/B of a form on the
# card's shapes: VN=(d new); VE=(X=0 TSC_NEW=1); card_decode; card_mtp).
card_decode() {
  synth_shape 9b shapes/qwen3.5-9B.json
  synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
  ab 9b $S/9b 2 --prompt 512 --gen 128 --runs 2
  ab 35b8 $S/35b8 2 --prompt 512 --gen 128 --runs 2
}
card_mtp() {
  ab 9b_mtp3 $S/9b 1 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
  ab 35b8_mtp3 $S/35b8 1 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
}
card() {
  local VN=(d) VE=(X=0) # ab reads these (bash's dynamic scope); the caller's own are untouched
  card_decode
  timeout 60 $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b.txt 2>&1; tl "cuda_bench 9b $?"
  card_mtp
}
device_end() { tl end; cd "$OUT" && tar czf r.tgz x && rm -rf x; }
tl start
