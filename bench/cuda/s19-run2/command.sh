#!/bin/bash
# session 19, device call 2: attention decode. (a) the stream's partials area 64K -> 1M floats (finer pieces:
# TSC_ATT_SMALL=65536 is the old one), (b) the combine's pieces' sums loaded at once, (c) TSC_ATTN_KV=2: the split
# kernel's scores a lane a key (k_attn_split_lk), at 512 / 4096 / 16384 tokens and in a 4096-token serving context
# (bench --ctx); the tests (the new form against the CPU reference and row-exact), sanitizers.
PACK=.gpu/s19b/pack.tar.xz . bench/cuda/device_env.sh
timeout 150 $B/ts_test cuda > $O/kern.log 2>&1; tl "ts_test cuda $?"
cb() { local n=$1; shift; env "$@" $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_$n.txt 2>&1; tl "cb $n $?"; }
for r in 1 2; do cb def_$r X=1; cb kv2_$r TSC_ATTN_KV=2; done
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
OLD=TSC_ATT_SMALL=65536
for r in a b; do
  bj 9b_old_$r $OLD $S/9b --prompt 512 --gen 128 --runs 2
  bj 9b_new_$r X=1 $S/9b --prompt 512 --gen 128 --runs 2
  bj 9b_kv2_$r TSC_ATTN_KV=2 $S/9b --prompt 512 --gen 128 --runs 2
done
for v in "old $OLD" "new X=1" "kv2 TSC_ATTN_KV=2"; do
  set -- $v; n=$1; shift
  bj 9b_${n}_ctx4k "$*" $S/9b --prompt 512 --gen 128 --runs 2 --ctx 4096
  bj 9b_${n}_ctx32k "$*" $S/9b --prompt 512 --gen 128 --runs 1 --ctx 32768
  bj 9b_${n}_p4k "$*" $S/9b --prompt 4096 --gen 128 --runs 1
  bj 9b_${n}_p16k "$*" $S/9b --prompt 16384 --gen 128 --runs 1
  bj 35b8_$n "$*" $S/35b8 --prompt 512 --gen 128 --runs 2
  bj def_$n "$*" models/default --prompt 512 --gen 128 --runs 2
done
bj 9b_mtp3_new X=1 $S/9b --prompt 512 --gen 128 --runs 2 --spec mtp --draft 3
bj 9b_mtp3_kv2 TSC_ATTN_KV=2 $S/9b --prompt 512 --gen 128 --runs 2 --spec mtp --draft 3
bj def_mtp3_kv2 TSC_ATTN_KV=2 models/default --prompt 512 --gen 128 --runs 2 --spec mtp --draft 3
TSC_ATTN_KV=2 timeout 200 $B/ts_test cuda_engine > $O/eng_kv2.log 2>&1; tl "ts_test cuda_engine kv2 $?"
timeout 60 compute-sanitizer --tool memcheck $B/ts_test cuda.attn_device_pos_big_pieces > $O/memcheck_attn.log 2>&1; tl "memcheck $?"
timeout 90 compute-sanitizer --tool racecheck $B/ts_test cuda.attn_short_parity_and_row_exact > $O/racecheck_attn.log 2>&1; tl "racecheck $?"
which nsys > $O/nsys.txt 2>&1
device_end
