#!/bin/bash
# session 14, device call 1: the host-side refactors of session 13 (f2014e6 and before) and expert
# streaming on the device (issue 18: device slots, pinned staging, the MoE kernels over the slot pool):
# kernel and engine tests, then the 8-layer 35B-A3B cut resident vs a 25% device cache (O_DIRECT
# reads from disk; buffered reads, i.e. the page cache as the host tier), 4 and 8 I/O threads
PACK=.gpu/s14/pack.tar.xz . bench/cuda/device_env.sh
timeout 150 $B/ts_test cuda_engine.expert_cache_identical_to_resident cuda_engine.expert_cache_errors \
  cuda_engine.plan_equals_device_allocations_and_close_returns_all > $O/xs_tests.log 2>&1; tl "xs tests rc $?"
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
# 8 layers + MTP = 9 x 256 experts of 1.6875 MiB in a slot: 25% = 576 slots = 972 MiB
bj 35b8_res X=1 $S/35b8 --prompt 512 --gen 64 --runs 2
bj 35b8_xc25 X=1 $S/35b8 --prompt 512 --gen 64 --runs 2 --expert-cache 972M
bj 35b8_xc25_buf TS_XC_DIRECT=0 $S/35b8 --prompt 512 --gen 64 --runs 2 --expert-cache 972M
bj 35b8_xc25_buf8 "TS_XC_DIRECT=0 TS_XC_IO=8" $S/35b8 --prompt 512 --gen 64 --runs 2 --expert-cache 972M
bj 35b8_xc100_buf TS_XC_DIRECT=0 $S/35b8 --prompt 512 --gen 64 --runs 2 --expert-cache 3888M
timeout 200 $B/ts_test cuda > $O/kern_tests.log 2>&1; tl "kern tests rc $?"
timeout 280 $B/ts_test cuda_engine > $O/engine_tests.log 2>&1; tl "engine tests rc $?"
device_end
