#!/bin/bash
# session 47, device call 5 (pack s46a, the build of 8815baf; right after s47-run4 on the same warm H100, typed
# into the call as one line, recorded here). gpu_check.sh's racecheck on the engine's quick set, which s47-run3's
# 70 s limit cut in its second test, given 230 s.
PACK=.gpu/s46a/pack.tar.xz . bench/cuda/device_env.sh; TS_CUDA_ENGINE_QUICK=1 timeout 230 compute-sanitizer --tool racecheck --error-exitcode 9 $B/ts_test cuda_engine.parity_every_fixture_and_the_default_model cuda.attn_device_pos_big_pieces cuda.gdn_fused_same_bits cuda.linear_many_same_bits > $O/engine_racecheck.log 2>&1; tl "racecheck $?"; device_end
