#!/bin/bash
# session 13, device call 3: which prompt-chunk product of tiny-dense INT4 differs (TSC_GEMM_CHECK)
PACK=.gpu/s13/pack.tar.xz . bench/cuda/device_env.sh
$B/turbospark convert tests/fixtures/tiny-dense $S/td4 --bits 4 > /dev/null 2>&1
TSC_GEMM_CHECK=1 $B/turbospark run --backend cuda -m $S/td4 -p "The river flows past the old mill and the children run along its banks, laughing at the ducks that paddle in the slow brown water while their parents watch from the bridge above" -n 2 --chunk 64 > $O/check_td4.txt 2>&1; tl "check td4 $?"
synth_shape 08 shapes/qwen3.5-0.8B.json
TSC_GEMM_CHECK=1 $B/turbospark bench --backend cuda -m $S/08 --prompt 64 --gen 2 --runs 1 > $O/check_08.txt 2>&1; tl "check 08 $?"
device_end
