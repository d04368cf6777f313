#!/bin/bash
# Session 53, call 4 (asked of an H200): s53-run1's card without the kernel tests and the 0.8B (~100 s), from pack
# s53a (the build of 27efed1). Prediction as in s53-run1: 9B ~570-575 tok/s (~60% of the probe), 35B-A3B-8L
# ~2,400-2,440.
PACK=.gpu/s53a/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 9b shapes/qwen3.5-9B.json
bj 9b_d_a X=0 $S/9b --prompt 512 --gen 128 --runs 2
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
bj 35b8_d_a X=0 $S/35b8 --prompt 512 --gen 128 --runs 2
bj 9b_d_b X=0 $S/9b --prompt 512 --gen 128 --runs 2
bj 35b8_d_b X=0 $S/35b8 --prompt 512 --gen 128 --runs 2
timeout 60 $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b.txt 2>&1; tl "cuda_bench 9b $?"
bj 9b_mtp3_d_a X=0 $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
TSC_TRACE_FILE=$O/te_9b_d.txt timeout 60 $B/turbospark_trace bench --backend cuda -m $S/9b --prompt 512 --gen 64 --runs 1 > $O/te_9b_d.log 2>&1; tl "engine trace 9b $?"
ls $O/te_*.txt > /dev/null 2>&1 && xz -T8 $O/te_*.txt
synth_shape 35b shapes/qwen3.5-35B-A3B.json
bj 35b_d_a X=0 $S/35b --prompt 512 --gen 128 --runs 2
device_end
