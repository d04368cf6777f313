#!/bin/bash
# session 43, device call 4 (never ran: no device time left; pack: the build of the commit that last changed this
# file, `bash bench/cuda/pack.sh s43f`, carry .gpu/s43f):
# 1. the two MoE engine tests: s43-run3's one failure mended (moe_shgu_one_launch_fewer_and_exact counted its
#    launches with the down's digits launch on, which only the short form takes), and
#    moe_down_digits_once_same_bits with TSC_MOE_GUDIG=2 (the gate/up's digits made by the route launch; 2 fails
#    where the form cannot be taken, so a pass means it ran and gave the same bits);
# 2. the engine group at the defaults, then under TSC_MOE_GUDIG=1;
# 3. TSC_MOE_GUDIG=1 against the defaults. Floors and prediction (H200, 35B-A3B-8L, per MoE layer): the gate/up's
#    in-block staging of the router's normed row is ~39% of its ncu stall samples (s43-run1); made by the route
#    launch's extra block beside the route's ~3-4 us serial chain, it leaves the chain, and the gate/up copies 2.3 KB
#    a token instead (one L2 round trip): -1..-1.5 us a layer, +2..3% (~2,424 -> ~2,480-2,500 tok/s).
PACK=.gpu/s43f/pack.tar.xz . bench/cuda/device_env.sh
timeout 60 $B/ts_test cuda_engine.moe_shgu_one_launch_fewer_and_exact cuda_engine.moe_down_digits_once_same_bits > $O/t_moe.log 2>&1; tl "moe tests $?"
timeout 100 $B/ts_test cuda_engine > $O/t_engine.log 2>&1; tl "cuda_engine $?"
TSC_MOE_GUDIG=1 timeout 100 $B/ts_test cuda_engine > $O/t_engine_gd.log 2>&1; tl "cuda_engine gudig $?"
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
VN=(d gd); VE=(X=0 TSC_MOE_GUDIG=1)
ab 35b8 $S/35b8 3 --prompt 512 --gen 128 --runs 2
ab 35b8_mtp3 $S/35b8 1 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
synth_shape 35b shapes/qwen3.5-35B-A3B.json
ab 35b $S/35b 1 --prompt 512 --gen 128 --runs 2
TSC_MOE_GUDIG=1 timeout 60 compute-sanitizer --tool memcheck $B/ts_test cuda_engine.moe_down_digits_once_same_bits > $O/cs_gd_mem.log 2>&1; tl "memcheck gd $?"
device_end
