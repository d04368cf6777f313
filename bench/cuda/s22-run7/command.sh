#!/bin/bash
# session 22, device call 7 (the last ~200 s): the final tree (the shared-slot and old down calls in one sub-block
# loop again: host code only, the same launches) through the engine's tests, and the 35B-A3B-8L decode once more.
PACK=.gpu/s22g/pack.tar.xz . bench/cuda/device_env.sh
timeout 120 $B/ts_test cuda_engine > $O/eng.log 2>&1; tl "ts_test cuda_engine $?"
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
bj 35b8_dec "X=1" $S/35b8 --prompt 512 --gen 128 --runs 2
device_end
