#!/bin/bash
# session 41, device call 5 (pack s41b: the build of bac6e7b, whose sources are this commit's): the acceptance card's
# figures at the defaults, short, in case the card that comes is an H200 (sessions 39-41 had only H100s; the H200
# figures of record are session 38's, before the carveout, EA, R1 and GC defaults).
PACK=.gpu/s41b/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
VN=(d); VE=(X=0)
ab 9b $S/9b 2 --prompt 512 --gen 128 --runs 2
ab 35b8 $S/35b8 2 --prompt 512 --gen 128 --runs 2
timeout 60 $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b.txt 2>&1; tl "cuda_bench 9b $?"
ab 9b_mtp3 $S/9b 1 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
device_end
