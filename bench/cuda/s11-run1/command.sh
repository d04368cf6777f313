#!/bin/bash
# session 11, device call 1: validate main + fold-residual + KS sweep; engine benches
R=$PWD; O=$OUT/x; mkdir -p $O; T0=$(date +%s)
tl() { echo "$(( $(date +%s) - T0 )) s: $*" >> $O/timeline.txt; }
tar -C /tmp -xJf .gpu/s11/pack.tar.xz; B=/tmp/b
export LD_LIBRARY_PATH=$B/lib TS_BIN=$B/turbospark NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > $O/smi.txt 2>&1
tl start
for v in KSRULE=0 KSRULE=1 KS=1 KS=2 KS=4 KS=8; do
  env TSC_Q4DP_$v $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb9_$v.txt 2>&1; tl "cb9 $v rc $?"
done
env TSC_Q4DP_KSRULE=1 $B/cuda_bench --shape 9b --mlx --digits 3 > $O/cb9_d3_r1.txt 2>&1; tl "cb9 d3 r1 $?"
$B/cuda_bench --shape 35b8 --mlx --digits 1 > $O/cb35_d1.txt 2>&1; tl "cb35 rc $?"
$B/cuda_bench --shape 0.8b --mlx --digits 1 > $O/cb08_d1.txt 2>&1; tl "cb08 rc $?"
S=/tmp/syn; mkdir -p $S
$B/turbospark synth --shape shapes/qwen3.5-9B.json --out $S/9b --bits 4 --quiet; tl "synth9 $?"
$B/turbospark synth --shape shapes/qwen3.5-0.8B.json --out $S/08 --bits 4 --quiet
$B/turbospark synth --shape bench/cuda/shape-35B-A3B-8L.json --out $S/35b8 --bits 4 --quiet; tl "synth rest"
bj() { n=$1; ev=$2; m=$3; shift 3; env $ev $B/turbospark bench --backend cuda -m $m --prompt 512 --gen 128 --runs 2 --json "$@" > $O/e_$n.json 2>>$O/e_err.log; tl "e_$n rc $?"; }
bj 9b_a X=1 $S/9b
bj 9b_f0 TSC_FUSE=0 $S/9b
bj 9b_r1 TSC_Q4DP_KSRULE=1 $S/9b
bj 9b_k2 TSC_Q4DP_KS=2 $S/9b
bj 9b_b X=1 $S/9b
bj 9b_24 X=1 $S/9b --act-bits 24
bj 08 X=1 $S/08
bj 08_r1 TSC_Q4DP_KSRULE=1 $S/08
bj 35b8 X=1 $S/35b8
bj 35b8_r1 TSC_Q4DP_KSRULE=1 $S/35b8
bj def X=1 models/default
for M in 1 2 3; do $B/turbospark bench --backend cuda -m models/default --prompt 512 --gen 256 --runs 2 --spec mtp --draft $M --json > $O/spec_d$M.json 2>>$O/e_err.log; tl "spec $M $?"; done
$B/ts_test cuda_engine > $O/engine_tests.log 2>&1; tl "engine tests rc $?"
$B/ts_test cuda > $O/kern_tests.log 2>&1; tl "kern tests rc $?"
TSC_Q4DP_KSRULE=1 $B/ts_test cuda_engine.parity_every_fixture_and_the_default_model cuda_engine.spec_greedy_exact_fixtures > $O/engine_r1.log 2>&1; tl "engine r1 $?"
timeout 150 ncu --metrics gpu__time_duration.sum --csv --launch-count 1200 $B/turbospark bench --backend cuda -m $S/9b --prompt 1 --gen 3 --runs 1 > $O/ncu9.csv 2>$O/ncu9.err; tl "ncu9 $?"
tl end
cd $OUT && tar czf r.tgz x && rm -rf x
