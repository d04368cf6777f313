#!/bin/bash
# session 15, device call 4: DFlash on the GPU with its passes captured: the target's verify pass with
# the drafter's taps (the tap copies inside the graph) and the drafter's block pass (everything after
# the embedding; attention from the device step record). The engine group (drafted output identical to
# plain, captured), the block-mask kernel test, bench on the default model (plain, MTP 3, DFlash
# 4/8/16, DFlash 16 with the drafter uncaptured: TSC_DGRAPH=0), then 4 held-out windows through
# bench/spec/dflash.sh on the GPU
PACK=.gpu/s15/pack.tar.xz . bench/cuda/device_env.sh
timeout 150 $B/ts_test cuda_engine > $O/engine_tests.log 2>&1; tl "engine tests rc $?"
timeout 60 $B/ts_test cuda.block_mask_attention_vs_cpu_backend > $O/kern_tests.log 2>&1; tl "kern tests rc $?"
G="--prompt 512 --gen 256 --runs 2"
bj def_plain X=1 models/default $G
bj def_mtp3 X=1 models/default $G --spec mtp --draft 3
bj def_df4 X=1 models/default $G --spec dflash --block 4
bj def_df8 X=1 models/default $G --spec dflash --block 8
bj def_df16 X=1 models/default $G --spec dflash --block 16
bj def_df16_nodg TSC_DGRAPH=0 models/default $G --spec dflash --block 16
TS_RUN_ARGS="--backend cuda" TS_WINDOWS=4 TS_MODES="plain;mtp 3;dflash 4;dflash 8;dflash 16" timeout 150 \
  bash bench/spec/dflash.sh models/default 1 128 > $O/dflash_heldout.md 2> $O/dflash_heldout.err; tl "dflash heldout rc $?"
device_end
