#!/bin/bash
# session 17, device call 7: call 6's embed_long_chunk failure was the test's own (half its random ids were
# negative, out of range: zero rows on the GPU, no reference on the host); the ids fixed, the embed tests again.
PACK=.gpu/s17f/pack.tar.xz . bench/cuda/device_env.sh
timeout 60 $B/ts_test cuda.embed_exact cuda.embed_long_chunk > $O/embed.log 2>&1; tl "embed tests $?"
device_end
