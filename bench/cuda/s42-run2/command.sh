#!/bin/bash
# session 42, device call 2, as it ran (the same H100, warm, right after call 1; the same binary: ringfloor.cu of
# 560e669): the probe twice more, for the run-to-run spread.
mkdir -p $OUT
for i in 1 2; do timeout 60 .gpu/s42a/ringfloor > $OUT/ringfloor_$i.txt 2>&1; echo "rc $?" >> $OUT/ringfloor_$i.txt; done
