#!/bin/bash
# session 20, call 1: the DFlash drafter on 3x the distinct prompts (tools/train/RESULTS.md "third data set").
# Tree: bench/cuda/slim.sh out, then tools/train restored and tests/fixtures removed (the tree under 64 MiB).
DEADLINE=540 OUT=$OUT bash tools/train/dflash_device.sh --prompts tools/train/dflash_prompts_x3.u16.xz --budget-gen 170 --budget-train 250 > $OUT/call.log 2>&1
