#!/bin/bash
# session 20, device call 6: the final tree (main): every GPU test, the sanitizers on the session's new tests,
# the session's prefill and decode figures once more, the 35B-A3B 8-layer prompt's op split, the whole 35B-A3B.
PACK=.gpu/s20e/pack.tar.xz . bench/cuda/device_env.sh
timeout 150 $B/ts_test cuda > $O/kern.log 2>&1; tl "ts_test cuda $?"
timeout 240 $B/ts_test cuda_engine > $O/eng.log 2>&1; tl "ts_test cuda_engine $?"
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
synth_shape 08b shapes/qwen3.5-0.8B.json
bj 9b_p512 X=1 $S/9b --prompt 512 --gen 128 --runs 2
bj 9b_p2048 X=1 $S/9b --prompt 2048 --gen 16 --runs 2
bj 35b8_p512 X=1 $S/35b8 --prompt 512 --gen 128 --runs 2
bj 35b8_p2048 X=1 $S/35b8 --prompt 2048 --gen 16 --runs 2
bj 08b_p512 X=1 $S/08b --prompt 512 --gen 128 --runs 2
bj def_p512 X=1 models/default --prompt 512 --gen 128 --runs 2
TSC_OPTIME=1 $B/turbospark bench --backend cuda -m $S/35b8 --prompt 512 --gen 4 --runs 1 > $O/optime_35b8_p512.txt 2>&1
TSC_OPTIME=1 $B/turbospark bench --backend cuda -m $S/9b --prompt 512 --gen 4 --runs 1 > $O/optime_9b_p512.txt 2>&1
tl optime
synth_shape 35b shapes/qwen3.5-35B-A3B.json
bj 35b_p512 X=1 $S/35b --prompt 512 --gen 128 --runs 2
bj 35b_p2048 X=1 $S/35b --prompt 2048 --gen 16 --runs 1
device_end
