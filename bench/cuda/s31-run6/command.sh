#!/bin/bash
# NOT RUN: session 31's device starts were refused at the end (its budget spent); a later session may run it.
# session 31, device call 6: the closing figures of the session's tree (pack s31d, as call 5: run-ahead as one
# launch, the copies as kernels, chained MTP drafts, the GDN record read before the wait) against TS_AHEAD=0 in
# the same call: engine decode of the 9B, 35B-A3B-8L, 0.8B shapes and the default model, three rounds interleaved.
# Carry .gpu/s31d (bench/cuda/slim.sh out-all s31-run6 first).
PACK=.gpu/s31d/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
synth_shape 08b shapes/qwen3.5-0.8B.json
for r in a b c; do
  for v in d a0; do
    case $v in d) ev=X=0 ;; a0) ev=TS_AHEAD=0 ;; esac
    bj 9b_${v}_$r "$ev" $S/9b --prompt 512 --gen 128 --runs 2
    bj 35b8_${v}_$r "$ev" $S/35b8 --prompt 512 --gen 128 --runs 2
    bj 08b_${v}_$r "$ev" $S/08b --prompt 512 --gen 128 --runs 2
    bj def_${v}_$r "$ev" models/default --prompt 512 --gen 128 --runs 2
  done
done
device_end
