#!/bin/bash
# Session 53, calls 2 and 3 (on s53-run1's warm H100, pack s53a already unpacked in /tmp/b by call 1): the six GDN
# kernel tests (four of them rewritten on gdn_in, 27efed1) under memcheck and racecheck, then the engine test group.
# The engine group needs tests/fixtures and models/default, which a call carrying pack s53a cannot fit beside it
# (64 MiB): it fails at its first file open (28 of 30 "cannot open ...config.json"), which says nothing of the engine.
export LD_LIBRARY_PATH=/tmp/b/lib:$LD_LIBRARY_PATH
G="cuda.gdn_step_parity_and_row_exact cuda.gdn_digits_same_as_staging cuda.gdn_prefill_vs_step cuda.gdn_step_engine_forms cuda.gdn_fused_same_bits cuda.gdn_nb2_same_bits"
timeout 200 compute-sanitizer --tool memcheck --leak-check full /tmp/b/ts_test $G > $OUT/memcheck_gdn.log 2>&1
timeout 120 compute-sanitizer --tool racecheck /tmp/b/ts_test $G > $OUT/racecheck_gdn.log 2>&1
timeout 200 /tmp/b/ts_test cuda_engine > $OUT/t_cuda_engine.log 2>&1
