#!/bin/bash
# session 17, device call 6: call 5 found `bench --prompt 8192` refused on the GPU (tsc_embed's 4096-row limit;
# now 65535, the other row ops' limit). The embed tests, then the 9B at 8192 and 16384 tokens of context with the
# attention K/V through shared memory (default) and without (TSC_ATTN_KV=0).
PACK=.gpu/s17e/pack.tar.xz . bench/cuda/device_env.sh
timeout 60 $B/ts_test cuda.embed_exact cuda.embed_long_chunk > $O/embed.log 2>&1; tl "embed tests $?"
synth_shape 9b shapes/qwen3.5-9B.json
for p in 8192 16384; do
  bj 9b_${p} X=1 $S/9b --prompt $p --gen 64 --runs 1
  bj 9b_${p}_nokv TSC_ATTN_KV=0 $S/9b --prompt $p --gen 64 --runs 1
done
device_end
