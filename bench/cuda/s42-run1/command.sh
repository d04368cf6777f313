#!/bin/bash
# session 42, device call 1 (pack s42a: the build of 291695d, whose src/ is this commit's, and bench/cuda/ringfloor.cu
# built alone): ringfloor's question (a persistent step whose weights stream through a TMA ring in shared memory,
# never waiting on a dependency, against the launch chain with PDL: can it reach 75% of the probe where the chain
# cannot?), twice; between them, if the card is an H200, the acceptance card's figures at the defaults (s41-run5's).
PACK=.gpu/s42a/pack.tar.xz . bench/cuda/device_env.sh
timeout 150 .gpu/s42a/ringfloor > $O/ringfloor.txt 2>&1; tl "ringfloor $?"
if grep -q H200 "$O/smi.txt"; then
  synth_shape 9b shapes/qwen3.5-9B.json
  synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
  VN=(d); VE=(X=0)
  ab 9b $S/9b 2 --prompt 512 --gen 128 --runs 2
  ab 35b8 $S/35b8 2 --prompt 512 --gen 128 --runs 2
  timeout 60 $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b.txt 2>&1; tl "cuda_bench 9b $?"
  ab 9b_mtp3 $S/9b 1 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
fi
timeout 150 .gpu/s42a/ringfloor > $O/ringfloor_2.txt 2>&1; tl "ringfloor again $?"
device_end
