#!/bin/bash
# session 12, device call 2: k_q4mm v2 (contiguous group ranges, vector scale and B loads), A/B against the
# session-11 cuda_bench (2d43163), the tests on main (dp4a default), then the DFlash drafter retrain
O=$OUT/x; mkdir -p $O; T0=$(date +%s)
tl() { echo "$(( $(date +%s) - T0 )) s: $*" >> $O/timeline.txt; }
tar -C /tmp -xJf .gpu/s12/pack.tar.xz; B=/tmp/b
export LD_LIBRARY_PATH=$B/lib TS_BIN=$B/turbospark NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit,temperature.gpu --format=csv > $O/smi.txt 2>&1
tl start
for r in 1 2; do
  $B/cuda_bench_head --shape 9b --mlx --digits 1 > $O/cb9_head_$r.txt 2>&1; tl "cb9 head $?"
  $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb9_$r.txt 2>&1; tl "cb9 $?"
  TSC_Q4MM=1 $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb9_mm_$r.txt 2>&1; tl "cb9 mm $?"
done
TSC_Q4MM=1 $B/cuda_bench --shape 0.8b --mlx --digits 1 > $O/cb08_mm.txt 2>&1; tl "cb08 mm $?"
$B/cuda_bench --shape 0.8b --mlx --digits 1 > $O/cb08.txt 2>&1; tl "cb08 $?"
timeout 150 $B/ts_test cuda > $O/kern_tests.log 2>&1; tl "kern tests rc $?"
S=/tmp/syn; mkdir -p $S
$B/turbospark synth --shape shapes/qwen3.5-9B.json --out $S/9b --bits 4 --quiet; tl synth
bj() { n=$1; ev=$2; m=$3; shift 3; env $ev $B/turbospark bench --backend cuda -m $m --prompt 512 --gen 128 --runs 3 --json "$@" > $O/e_$n.json 2>>$O/e_err.log; tl "e_$n rc $?"; }
bj 9b X=1 $S/9b
bj 9b_mm TSC_Q4MM=1 $S/9b
bj 9b_lw0 TSC_Q4DP_LATEW=0 $S/9b
bj def X=1 models/default
bj def_mm TSC_Q4MM=1 models/default
p=$($B/turbospark run --backend cuda -m models/default -p "The river" -n 128 --print-ids 2>/dev/null)
d=$(TSC_Q4MM=1 $B/turbospark run --backend cuda -m models/default -p "The river" -n 128 --print-ids 2>/dev/null)
e=$(TSC_Q4MM=1 $B/turbospark run --backend cuda -m models/default -p "The river" -n 128 --print-ids --spec mtp --draft 3 2>/dev/null)
[ -n "$d" ] && [ "$d" = "$e" ] && echo "mm: mtp d3 identical to mm plain" >> $O/cli.txt || echo "mm: mtp d3 DIFFERS" >> $O/cli.txt
[ "$p" = "$d" ] && echo "mm plain == dp4a plain (128 tokens)" >> $O/cli.txt || echo "mm plain != dp4a plain (128 tokens)" >> $O/cli.txt
timeout 150 $B/ts_test cuda_engine > $O/engine_tests.log 2>&1; tl "engine tests rc $?"
tl "dftrain start"
timeout 290 bash tools/train/dflash_device.sh > $O/dftrain_stdout.txt 2>&1; tl "dftrain rc $?"
tl end
cd $OUT && tar czf r.tgz x && rm -rf x
