#!/bin/bash
# Session 53, call 5: the engine test group at HEAD on the GPU (last whole in s47-run1; since then N and U became the
# defaults and HS came and went), with the fixtures and the bundled model in the tree: pack s53t is ts_test alone
# (the build of 27efed1, 13.9 MB; PACK_MAIN=ts_test, no trace build), the tree slimmed by `slim.sh out-all s53-run5`
# without removing tests/fixtures or models/default (48.4 MB). Then memcheck over gpu_check.sh's engine quick set
# cut at 90 s (the
# wide-MoE row dropped: too little device time was left after the refused starts).
PACK=.gpu/s53t/pack.tar.xz . bench/cuda/device_env.sh
timeout 150 $B/ts_test cuda_engine > $O/t_cuda_engine.log 2>&1; tl "cuda_engine $?"
TS_CUDA_ENGINE_QUICK=1 timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 $B/ts_test \
  cuda_engine.parity_every_fixture_and_the_default_model cuda_engine.plan_equals_device_allocations_and_close_returns_all \
  cuda.attn_device_pos_big_pieces cuda.attn_pieces_by_row_length cuda.blas_prefill_products cuda.linear_many_same_bits \
  > $O/engine_memcheck.log 2>&1; tl "memcheck engine quick $?"
device_end
