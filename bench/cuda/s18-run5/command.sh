#!/bin/bash
# session 18, device call 5 (issue 19): the DFlash drafter of the default model trained longer: session 12's recipe
# (tools/train/dflash_device.sh, 2 layers, taps 1,3,5,7) with 350 s of training instead of 150 (its validation
# loss was still falling at 100 s), deadline 440 s.
DEADLINE=440 OUT=$OUT bash tools/train/dflash_device.sh --budget-train 350 > $OUT/device.txt 2>&1
echo "exit $?" >> $OUT/device.txt
