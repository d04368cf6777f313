#!/bin/bash
# session 42, device call 3, as it ran (the same H100, still warm): ringfloor.cu of 5a2a329 (each ring form's last run
# split by item kind, as block 0 sees it), built as in call 1. (bc09d2f's nodep / nobytes forms never ran: no device
# time was left to start a machine.)
mkdir -p $OUT
timeout 60 .gpu/s42a/ringfloor > $OUT/ringfloor_t.txt 2>&1; echo "rc $?" >> $OUT/ringfloor_t.txt
