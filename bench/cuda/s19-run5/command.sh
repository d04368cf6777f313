#!/bin/bash
# session 19, device call 5: the new defaults (attention split with the scores a lane a key; the GDN step in one
# kernel for several rows, its state loads hoisted before the prep) against the old forms (TSC_ATTN_KV=1
# TSC_GDN_FUSED=0), interleaved: tests, cuda_bench, the engine, and MTP on the default model over the 16 held-out
# windows (prompts64.txt: the first 64 ids of each, tools/train/heldout.ids), 128 greedy tokens, plain and draft 3.
PACK=.gpu/s19e/pack.tar.xz . bench/cuda/device_env.sh
OLDF="TSC_ATTN_KV=1 TSC_GDN_FUSED=0"
timeout 150 $B/ts_test cuda > $O/kern.log 2>&1; tl "ts_test cuda $?"
cb() { local n=$1; shift; env "$@" $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_$n.txt 2>&1; tl "cb $n $?"; }
for r in 1 2 3; do cb new_$r X=1; cb old_$r $OLDF; cb fu1_$r TSC_GDN_FUSED=1; done
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
G="--prompt 512 --gen 128 --runs 2"
for r in a b; do
  bj 9b_new_$r X=1 $S/9b $G
  bj 9b_old_$r "$OLDF" $S/9b $G
  bj 35b8_new_$r X=1 $S/35b8 $G
  bj 35b8_old_$r "$OLDF" $S/35b8 $G
done
bj 9b_mtp3_new X=1 $S/9b $G --spec mtp --draft 3
bj 9b_mtp3_old "$OLDF" $S/9b $G --spec mtp --draft 3
bj def_new X=1 models/default $G
bj def_old "$OLDF" models/default $G
i=0
while read -r p; do
  i=$((i + 1))
  for v in new old; do
    ev=X=1; [ $v = old ] && ev="$OLDF"
    env $ev $B/turbospark run -m models/default --backend cuda --ids "$p" -n 128 --print-ids > $O/h_${v}_plain_$i.ids 2> $O/h_${v}_plain_$i.err
    env $ev $B/turbospark run -m models/default --backend cuda --ids "$p" -n 128 --spec mtp --draft 3 --print-ids > $O/h_${v}_mtp3_$i.ids 2> $O/h_${v}_mtp3_$i.err
  done
done < bench/cuda/s19-run5/prompts64.txt
tl "heldout $i windows"
timeout 200 $B/ts_test cuda_engine > $O/eng.log 2>&1; tl "ts_test cuda_engine $?"
timeout 60 compute-sanitizer --tool memcheck $B/ts_test cuda.gdn_fused_same_bits > $O/memcheck_gdn.log 2>&1; tl "memcheck $?"
device_end
