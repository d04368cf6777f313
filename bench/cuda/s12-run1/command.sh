#!/bin/bash
# session 12, device call 1: k_q4mm (tensor-core 4-bit products for 1..16 rows, 8-bit x), MoE route/combine, embed
O=$OUT/x; mkdir -p $O; T0=$(date +%s)
tl() { echo "$(( $(date +%s) - T0 )) s: $*" >> $O/timeline.txt; }
tar -C /tmp -xJf .gpu/s12/pack.tar.xz; B=/tmp/b
export LD_LIBRARY_PATH=$B/lib TS_BIN=$B/turbospark NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit,temperature.gpu --format=csv > $O/smi.txt 2>&1
tl start
timeout 150 $B/ts_test cuda > $O/kern_tests.log 2>&1; tl "kern tests rc $?"
$B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb9.txt 2>&1; tl "cb9 $?"
TSC_Q4MM=0 $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb9_mm0.txt 2>&1; tl "cb9 mm0 $?"
$B/cuda_bench --shape 0.8b --mlx --digits 1 > $O/cb08.txt 2>&1; tl "cb08 $?"
TSC_Q4MM=0 $B/cuda_bench --shape 0.8b --mlx --digits 1 > $O/cb08_mm0.txt 2>&1; tl "cb08 mm0 $?"
S=/tmp/syn; mkdir -p $S
$B/turbospark synth --shape shapes/qwen3.5-9B.json --out $S/9b --bits 4 --quiet
$B/turbospark synth --shape shapes/qwen3.5-0.8B.json --out $S/08 --bits 4 --quiet
$B/turbospark synth --shape bench/cuda/shape-35B-A3B-8L.json --out $S/35b8 --bits 4 --quiet; tl "synth"
bj() { n=$1; ev=$2; m=$3; shift 3; env $ev $B/turbospark bench --backend cuda -m $m --prompt 512 --gen 128 --runs 3 --json "$@" > $O/e_$n.json 2>>$O/e_err.log; tl "e_$n rc $?"; }
bj 9b X=1 $S/9b
bj 9b_mm0 TSC_Q4MM=0 $S/9b
bj 9b_lw0 TSC_Q4DP_LATEW=0 $S/9b
bj 9b_p2k X=1 $S/9b --prompt 2048 --gen 16
bj 9b_p2k_mm0 TSC_Q4MM=0 $S/9b --prompt 2048 --gen 16
bj 08 X=1 $S/08
bj 08_mm0 TSC_Q4MM=0 $S/08
bj 35b8 X=1 $S/35b8
bj 35b8_mm0 TSC_Q4MM=0 $S/35b8
bj def X=1 models/default
bj def_mm0 TSC_Q4MM=0 models/default
for MM in 1 0; do for M in 1 2 3 4 6; do
  TSC_Q4MM=$MM $B/turbospark bench --backend cuda -m models/default --prompt 512 --gen 256 --runs 2 --spec mtp --draft $M --json > $O/spec_mm${MM}_d$M.json 2>>$O/e_err.log; tl "spec mm$MM d$M $?"
done; done
for M in 1 3; do $B/turbospark bench --backend cuda -m $S/9b --prompt 64 --gen 64 --runs 2 --spec mtp --draft $M --json > $O/spec9b_d$M.json 2>>$O/e_err.log; tl "spec9b d$M $?"; done
for blk in 4 16; do $B/turbospark bench --backend cuda -m models/default --prompt 512 --gen 256 --runs 2 --spec dflash --block $blk --json > $O/dflash_b$blk.json 2>>$O/e_err.log; tl "dflash b$blk $?"; done
p=$($B/turbospark run --backend cuda -m models/default -p "The river" -n 128 --print-ids 2>/dev/null)
d=$($B/turbospark run --backend cuda -m models/default -p "The river" -n 128 --print-ids --spec mtp --draft 3 2>$O/mtprun.log); [ -n "$p" ] && [ "$p" = "$d" ] && echo "mtp d3 run identical" >> $O/cli.txt || echo "mtp d3 run DIFFERS" >> $O/cli.txt
d=$($B/turbospark run --backend cuda -m models/default -p "The river" -n 128 --print-ids --spec dflash --block 16 2>$O/dfrun.log); [ -n "$p" ] && [ "$p" = "$d" ] && echo "dflash b16 run identical" >> $O/cli.txt || echo "dflash b16 run DIFFERS" >> $O/cli.txt
c=$($B/turbospark run --backend cpu -m models/default -p "The river" -n 128 --print-ids 2>/dev/null); [ "$p" = "$c" ] && echo "gpu plain == cpu plain (128 tokens)" >> $O/cli.txt || echo "gpu plain != cpu plain (128 tokens)" >> $O/cli.txt
tl "cli"
timeout 240 $B/ts_test cuda_engine > $O/engine_tests.log 2>&1; tl "engine tests rc $?"
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 $B/ts_test cuda.linear_parity_and_row_exact cuda.fused_products_dp4a cuda.moe_route_exact cuda.embed_exact > $O/memcheck_k.log 2>&1; tl "memcheck k $?"
timeout 90 compute-sanitizer --tool racecheck --error-exitcode 9 $B/ts_test cuda.fused_products_dp4a cuda.moe_route_exact cuda.moe_linear_parity_and_row_exact > $O/racecheck_k.log 2>&1; tl "racecheck k $?"
if [ $(( $(date +%s) - T0 )) -lt 400 ]; then
  $B/turbospark synth --shape shapes/qwen3.5-35B-A3B.json --out $S/35b --bits 4 --quiet; tl "synth 35b $?"
  bj 35b X=1 $S/35b
fi
tl end
cd $OUT && tar czf r.tgz x && rm -rf x
