#!/bin/bash
# session 12, device call 3: k_q4dp back to its session-11 form (the 10% regression), the retrained DFlash drafter
O=$OUT/x; mkdir -p $O; T0=$(date +%s)
tl() { echo "$(( $(date +%s) - T0 )) s: $*" >> $O/timeline.txt; }
tar -C /tmp -xJf .gpu/s12/pack.tar.xz; B=/tmp/b
export LD_LIBRARY_PATH=$B/lib TS_BIN=$B/turbospark NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit,temperature.gpu --format=csv > $O/smi.txt 2>&1
tl start
for r in 1 2; do
  $B/cuda_bench_head --shape 9b --mlx --digits 1 > $O/cb9_head_$r.txt 2>&1; tl "cb9 head $?"
  $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb9_$r.txt 2>&1; tl "cb9 $?"
done
TSC_Q4MM=1 $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb9_mm.txt 2>&1; tl "cb9 mm $?"
$B/cuda_bench --shape 0.8b --mlx --digits 1 > $O/cb08.txt 2>&1; tl "cb08 $?"
S=/tmp/syn; mkdir -p $S
$B/turbospark synth --shape shapes/qwen3.5-9B.json --out $S/9b --bits 4 --quiet
$B/turbospark synth --shape shapes/qwen3.5-0.8B.json --out $S/08 --bits 4 --quiet
$B/turbospark synth --shape bench/cuda/shape-35B-A3B-8L.json --out $S/35b8 --bits 4 --quiet; tl "synth"
bj() { n=$1; ev=$2; m=$3; shift 3; env $ev $B/turbospark bench --backend cuda -m $m --prompt 512 --gen 128 --runs 3 --json "$@" > $O/e_$n.json 2>>$O/e_err.log; tl "e_$n rc $?"; }
bj 9b X=1 $S/9b
bj 9b_mm TSC_Q4MM=1 $S/9b
bj 08 X=1 $S/08
bj 35b8 X=1 $S/35b8
bj def X=1 models/default
for M in 1 2 3 4; do
  $B/turbospark bench --backend cuda -m models/default --prompt 512 --gen 256 --runs 2 --spec mtp --draft $M --json > $O/spec_d$M.json 2>>$O/e_err.log; tl "spec d$M $?"
done
for blk in 4 8 16; do $B/turbospark bench --backend cuda -m models/default --prompt 512 --gen 256 --runs 2 --spec dflash --block $blk --json > $O/dflash_b$blk.json 2>>$O/e_err.log; tl "dflash b$blk $?"; done
p=$($B/turbospark run --backend cuda -m models/default -p "The river" -n 128 --print-ids 2>/dev/null)
for blk in 4 16; do d=$($B/turbospark run --backend cuda -m models/default -p "The river" -n 128 --print-ids --spec dflash --block $blk 2>$O/dfrun$blk.log); [ -n "$p" ] && [ "$p" = "$d" ] && echo "dflash run b$blk identical" >> $O/cli.txt || echo "dflash run b$blk DIFFERS" >> $O/cli.txt; done
tl cli
timeout 150 $B/ts_test cuda > $O/kern_tests.log 2>&1; tl "kern tests rc $?"
timeout 150 $B/ts_test cuda_engine > $O/engine_tests.log 2>&1; tl "engine tests rc $?"
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 $B/ts_test cuda.linear_parity_and_row_exact cuda.fused_products_dp4a > $O/memcheck_k.log 2>&1; tl "memcheck k $?"
timeout 60 compute-sanitizer --tool racecheck --error-exitcode 9 $B/ts_test cuda.fused_products_dp4a > $O/racecheck_k.log 2>&1; tl "racecheck k $?"
if [ $(( $(date +%s) - T0 )) -lt 400 ]; then
  $B/turbospark synth --shape shapes/qwen3.5-35B-A3B.json --out $S/35b --bits 4 --quiet; tl "synth 35b $?"
  bj 35b X=1 $S/35b
fi
tl end
cd $OUT && tar czf r.tgz x && rm -rf x
