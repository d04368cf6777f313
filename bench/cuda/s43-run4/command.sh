#!/bin/bash
# session 43, device call 4 (pack s43e: the build of this commit's sources, bar this file): the two MoE engine tests
# after s43-run3's one failure (moe_shgu_one_launch_fewer_and_exact counted its launches with the down's digits
# launch on, which only the short form takes), then the whole engine group at the defaults if time is left.
PACK=.gpu/s43e/pack.tar.xz . bench/cuda/device_env.sh
timeout 60 $B/ts_test cuda_engine.moe_shgu_one_launch_fewer_and_exact cuda_engine.moe_down_digits_once_same_bits > $O/t_moe.log 2>&1; tl "moe tests $?"
timeout 100 $B/ts_test cuda_engine > $O/t_engine.log 2>&1; tl "cuda_engine $?"
device_end
