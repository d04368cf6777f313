#!/bin/bash
# session 18, device call 4: the GPU tests of tensor parallelism after the watchdog (abortable collectives,
# ncclCommAbort) went in; a stuck rank on the GPU (ranks sharing it) ends in an error, not a hang.
PACK=.gpu/s18d/pack.tar.xz . bench/cuda/device_env.sh
timeout 240 $B/ts_test tp > $O/tp.log 2>&1; tl "ts_test tp $?"
TS_TP_ONE_DEVICE=1 TS_TP_TIMEOUT_S=1 TS_TP_TEST_STALL=1:3 timeout 60 $B/turbospark run -m models/default --backend cuda --gpus 2 -n 8 --ids 1,2,3 > $O/stuck.txt 2>&1; tl "stuck rank run: exit $? (expect 1, within seconds)"
device_end
