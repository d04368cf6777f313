#!/bin/bash
# session 22, device call 5: call 4's expert-cache failure fixed (the shared slot was taken or not by nr * (k Im + Is)
# against the scratch, so a 16-row pass and a streamed group of its rows took different forms: now by the shapes
# alone, the shared rows in b0); the engine tests again, the A/B again (call 4: 1,784-1,803 against 1,687-1,695),
# ncu of a step with the slot (call 4's ncu ran at --prompt 1, where the old form was taken), and DFlash on the
# default model at blocks of 4..8 (5..7-row passes in one pass since call 3).
PACK=.gpu/s22e/pack.tar.xz . bench/cuda/device_env.sh
timeout 170 $B/ts_test cuda_engine > $O/eng.log 2>&1; tl "ts_test cuda_engine $?"
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
for r in a b; do
  bj 35b8_dec_slot_$r "X=1" $S/35b8 --prompt 512 --gen 128 --runs 2
  bj 35b8_dec_old_$r "TSC_MOE_SHARED_SLOT=0" $S/35b8 --prompt 512 --gen 128 --runs 2
done
NCU="ncu --clock-control none --metrics gpu__time_duration.sum --csv"
timeout 60 $NCU --launch-count 400 $B/turbospark bench --backend cuda -m $S/35b8 --prompt 1 --gen 3 --runs 1 > $O/ncu35_dec_slot.csv 2>$O/ncu_err.log; tl "ncu $?"
xz -9 $O/ncu*.csv
grep -v '^#' tools/train/heldout.ids | head -n 1 | cut -d, -f1-64 > /tmp/p64.ids
for b in 4 5 6 8; do bj def_df$b "X=1" models/default --prompt 64 --gen 256 --runs 2 --spec dflash --block $b --ids-file /tmp/p64.ids; done
bj def_plain "X=1" models/default --prompt 64 --gen 256 --runs 2 --ids-file /tmp/p64.ids
device_end
