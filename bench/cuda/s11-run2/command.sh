#!/bin/bash
# session 11, device call 2: prefetch + KS rule 1 + SB 4 + dp4a experts
O=$OUT/x; mkdir -p $O; T0=$(date +%s)
tl() { echo "$(( $(date +%s) - T0 )) s: $*" >> $O/timeline.txt; }
tar -C /tmp -xJf .gpu/s11/pack.tar.xz; B=/tmp/b
export LD_LIBRARY_PATH=$B/lib TS_BIN=$B/turbospark NCCL_NVLS_ENABLE=0
tl start
for pf in 0 32768 65536 131072; do
  TSC_Q4DP_PF=$pf $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb9_pf$pf.txt 2>&1; tl "cb9 pf $pf rc $?"
done
TSC_Q4DP_PF=0 $B/cuda_bench --shape 0.8b --mlx --digits 1 > $O/cb08_pf0.txt 2>&1
$B/cuda_bench --shape 0.8b --mlx --digits 1 > $O/cb08_pf.txt 2>&1; tl "cb08"
S=/tmp/syn; mkdir -p $S
$B/turbospark synth --shape shapes/qwen3.5-9B.json --out $S/9b --bits 4 --quiet
$B/turbospark synth --shape shapes/qwen3.5-0.8B.json --out $S/08 --bits 4 --quiet
$B/turbospark synth --shape bench/cuda/shape-35B-A3B-8L.json --out $S/35b8 --bits 4 --quiet; tl "synth"
bj() { n=$1; ev=$2; m=$3; shift 3; env $ev $B/turbospark bench --backend cuda -m $m --prompt 512 --gen 128 --runs 2 --json "$@" > $O/e_$n.json 2>>$O/e_err.log; tl "e_$n rc $?"; }
bj 35b8 X=1 $S/35b8
bj 35b8_old TSC_MOE_DP4A=0 $S/35b8
bj 9b X=1 $S/9b
bj 9b_pf0 TSC_Q4DP_PF=0 $S/9b
bj 9b_r0 TSC_Q4DP_KSRULE=0 $S/9b
bj 9b_2 X=1 $S/9b
bj 08 X=1 $S/08
bj def X=1 models/default
bj 35b8_2 X=1 $S/35b8
$B/ts_test cuda_engine > $O/engine_tests.log 2>&1; tl "engine tests rc $?"
$B/ts_test cuda > $O/kern_tests.log 2>&1; tl "kern tests rc $?"
TSC_MOE_DP4A=0 $B/ts_test cuda_engine.parity_every_fixture_and_the_default_model > $O/engine_parity_moe_old.log 2>&1; tl "parity old moe $?"
TS_CUDA_ENGINE_QUICK=1 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $B/ts_test cuda_engine.parity_every_fixture_and_the_default_model > $O/memcheck_engine.log 2>&1; tl "memcheck $?"
timeout 100 ncu --metrics gpu__time_duration.sum --csv --launch-count 700 $B/turbospark bench --backend cuda -m $S/35b8 --prompt 1 --gen 3 --runs 1 > $O/ncu35.csv 2>$O/ncu35.err; tl "ncu35 $?"
# the full 40-layer 35B-A3B (about 20 GB)
$B/turbospark synth --shape shapes/qwen3.5-35B-A3B.json --out $S/35b --bits 4 --quiet; tl "synth 35b $?"
bj 35b X=1 $S/35b
tl end
cd $OUT && tar czf r.tgz x && rm -rf x
