#!/bin/bash
# session 12, device call 5: k_q4mm v3 (the next group's mma before this group's scale step; 2 blocks an SM forced)
O=$OUT/x; mkdir -p $O; T0=$(date +%s)
tl() { echo "$(( $(date +%s) - T0 )) s: $*" >> $O/timeline.txt; }
tar -C /tmp -xJf .gpu/s12/pack.tar.xz; B=/tmp/b
export LD_LIBRARY_PATH=$B/lib TS_BIN=$B/turbospark NCCL_NVLS_ENABLE=0
tl start
timeout 100 $B/ts_test cuda.linear_parity_and_row_exact cuda.fused_products_dp4a > $O/kern_tests.log 2>&1; tl "kern tests rc $?"
for r in 1 2; do
  $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb9_$r.txt 2>&1; tl "cb9 $?"
  TSC_Q4MM=1 $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb9_mm_$r.txt 2>&1; tl "cb9 mm $?"
done
S=/tmp/syn; mkdir -p $S
$B/turbospark synth --shape shapes/qwen3.5-9B.json --out $S/9b --bits 4 --quiet; tl synth
bj() { n=$1; ev=$2; m=$3; shift 3; env $ev $B/turbospark bench --backend cuda -m $m --prompt 512 --gen 128 --runs 3 --json "$@" > $O/e_$n.json 2>>$O/e_err.log; tl "e_$n rc $?"; }
bj 9b X=1 $S/9b
bj 9b_mm TSC_Q4MM=1 $S/9b
p=$(TSC_Q4MM=1 $B/turbospark run --backend cuda -m models/default -p "The river" -n 128 --print-ids 2>/dev/null)
e=$(TSC_Q4MM=1 $B/turbospark run --backend cuda -m models/default -p "The river" -n 128 --print-ids --spec mtp --draft 3 2>/dev/null)
[ -n "$p" ] && [ "$p" = "$e" ] && echo "mm: mtp d3 identical to mm plain" >> $O/cli.txt || echo "mm: mtp d3 DIFFERS" >> $O/cli.txt
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 $B/ts_test cuda.linear_parity_and_row_exact > $O/memcheck_k.log 2>&1; tl "memcheck $?"
tl end
cd $OUT && tar czf r.tgz x && rm -rf x
