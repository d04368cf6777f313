#!/bin/bash
# session 49, device call 2: U's bits only (what s49-run1 dropped), with the 260 s of device time left. Pack s49c: s49b
# without its trace binary, for room (the build of 5fdc48d: its gdn.cu is the final commit's). If they pass, U can be flipped in a later session
# after s50-run1's alternated A/B.
PACK=.gpu/s49c/pack.tar.xz . bench/cuda/device_env.sh
TSC_GDN_NBU=1 timeout 60 $B/ts_test cuda.gdn_nb2_same_bits cuda.gdn_digits_same_as_staging cuda.gdn_fused_same_bits > $O/t_nbu.log 2>&1; tl "nbu tests $?"
TSC_GDN_NBU=1 timeout 90 $B/ts_test cuda_engine.spec_greedy_exact_fixtures cuda_engine.parity_every_fixture_and_the_default_model cuda_engine.spec_greedy_exact_default_model > $O/t_engine_nbu.log 2>&1; tl "engine under nbu $?"
device_end
