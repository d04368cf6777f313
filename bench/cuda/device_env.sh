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
bj() { local n=$1 ev=$2 m=$3; shift 3; env $ev $B/turbospark bench --backend cuda -m "$m" --json "$@" > "$O/e_$n.json" 2>>"$O/e_err.log"; tl "e_$n rc $?"; }
device_end() { tl end; cd "$OUT" && tar czf r.tgz x && rm -rf x; }
tl start
