#!/bin/bash
# session 11, device call 3: merged main (dp4a experts, KS rule, fold; verify graphs; DFlash on CUDA)
O=$OUT/x; mkdir -p $O; T0=$(date +%s)
tl() { echo "$(( $(date +%s) - T0 )) s: $*" >> $O/timeline.txt; }
tar -C /tmp -xJf .gpu/s11/pack.tar.xz; B=/tmp/b
export LD_LIBRARY_PATH=$B/lib TS_BIN=$B/turbospark NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit,temperature.gpu --format=csv > $O/smi.txt 2>&1
tl start
$B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb9.txt 2>&1; tl "cb9 $?"
TSC_Q4DP_KSRULE=0 $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb9_r0.txt 2>&1; tl "cb9 r0 $?"
$B/cuda_bench --shape 0.8b --mlx --digits 1 > $O/cb08.txt 2>&1; tl "cb08 $?"
S=/tmp/syn; mkdir -p $S
$B/turbospark synth --shape shapes/qwen3.5-9B.json --out $S/9b --bits 4 --quiet
$B/turbospark synth --shape shapes/qwen3.5-0.8B.json --out $S/08 --bits 4 --quiet
$B/turbospark synth --shape bench/cuda/shape-35B-A3B-8L.json --out $S/35b8 --bits 4 --quiet; tl "synth"
bj() { n=$1; ev=$2; m=$3; shift 3; env $ev $B/turbospark bench --backend cuda -m $m --prompt 512 --gen 128 --runs 3 --json "$@" > $O/e_$n.json 2>>$O/e_err.log; tl "e_$n rc $?"; }
bj 9b X=1 $S/9b
bj 9b_r0 TSC_Q4DP_KSRULE=0 $S/9b
bj 08 X=1 $S/08
bj 35b8 X=1 $S/35b8
bj 35b8_old TSC_MOE_DP4A=0 $S/35b8
bj 35b8_f0 TSC_FUSE=0 $S/35b8
bj def X=1 models/default
for VG in 1 0; do for M in 1 2 3 4; do
  TSC_VGRAPH=$VG $B/turbospark bench --backend cuda -m models/default --prompt 512 --gen 256 --runs 2 --spec mtp --draft $M --json > $O/spec_vg${VG}_d$M.json 2>>$O/e_err.log; tl "spec vg$VG d$M $?"
done; done
for blk in 4 8 16; do $B/turbospark bench --backend cuda -m models/default --prompt 512 --gen 256 --runs 2 --spec dflash --block $blk --json > $O/dflash_b$blk.json 2>>$O/e_err.log; tl "dflash b$blk $?"; done
p=$($B/turbospark run --backend cuda -m models/default -p "The river" -n 96 --print-ids 2>/dev/null)
for blk in 4 16; do d=$($B/turbospark run --backend cuda -m models/default -p "The river" -n 96 --print-ids --spec dflash --block $blk 2>$O/dfrun$blk.log); [ -n "$p" ] && [ "$p" = "$d" ] && echo "dflash run b$blk identical" >> $O/cli.txt || echo "dflash run b$blk DIFFERS" >> $O/cli.txt; done
tl "cli"
timeout 200 $B/ts_test cuda > $O/kern_tests.log 2>&1; tl "kern tests rc $?"
timeout 300 $B/ts_test cuda_engine > $O/engine_tests.log 2>&1; tl "engine tests rc $?"
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 $B/ts_test cuda.block_mask_attention_vs_cpu_backend cuda.gdn_step_engine_forms > $O/memcheck_k.log 2>&1; tl "memcheck k $?"
timeout 60 compute-sanitizer --tool racecheck --error-exitcode 9 $B/ts_test cuda.block_mask_attention_vs_cpu_backend cuda.gdn_step_engine_forms > $O/racecheck_k.log 2>&1; tl "racecheck k $?"
if [ $(( $(date +%s) - T0 )) -lt 380 ]; then
  $B/turbospark synth --shape shapes/qwen3.5-35B-A3B.json --out $S/35b --bits 4 --quiet; tl "synth 35b $?"
  bj 35b X=1 $S/35b
fi
tl end
cd $OUT && tar czf r.tgz x && rm -rf x
