#!/bin/bash
# Session 52, call 1: s51-run2's script, run from pack s52a, the build of 66f2abd (the review mend 4d85bc7 included):
# make -j2 BUILD=build-cuda CUDA=1 WERROR=-Werror all, and the trace build's turbospark (make -j2
# BUILD=build-cuda-trace CUDA=1 EXTRA_NVCC_FLAGS=-DTSC_TRACE build-cuda-trace/turbospark); PACK_MAIN="turbospark
# ts_test cuda_bench" bash bench/cuda/pack.sh s52a; the tree without its fixtures and bundled model, which nothing here reads).
# HS (q4dp.cu's hs_store, TSC_MOE_HS): the MoE gate/up writes h = silu(g) * u itself; 1 keeps the down's digits
# launch (plain words), 2 drops it for one-token passes (the down stages h's digits in its blocks).
# Prediction: 35B-A3B-8L +2..3% under 2 (-1.5..-2 us a MoE layer), 1 within +-0.5%; the 40-layer shape +3..4%.
# 1. bits: the new engine test (kernel counts, prompt logits at passes of 1 and 5, greedy with and without MTP);
# 2. the A/B on the 35B-A3B-8L, three rounds interleaved, the order reversed in round b; the 40-layer shape, d and 2;
# 3. engine traces of the 35B-A3B-8L, d and 2 (where the time moved);
# 4. the card's other figures at the defaults (in case this is an H200): 9B decode, cuda_bench's 9B, MTP 3 forced.
PACK=.gpu/s52a/pack.tar.xz . bench/cuda/device_env.sh
timeout 150 $B/ts_test cuda_engine.moe_h_by_gate_up_same_bits > $O/t_hs.log 2>&1; tl "t_hs $?"
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
VN=(d hs1 hs2); VE=(X=0 TSC_MOE_HS=1 TSC_MOE_HS=2)
ab 35b8 $S/35b8 1 --prompt 512 --gen 128 --runs 2
bj 35b8_hs2_b TSC_MOE_HS=2 $S/35b8 --prompt 512 --gen 128 --runs 2
bj 35b8_hs1_b TSC_MOE_HS=1 $S/35b8 --prompt 512 --gen 128 --runs 2
bj 35b8_d_b X=0 $S/35b8 --prompt 512 --gen 128 --runs 2
bj 35b8_d_c X=0 $S/35b8 --prompt 512 --gen 128 --runs 2
bj 35b8_hs1_c TSC_MOE_HS=1 $S/35b8 --prompt 512 --gen 128 --runs 2
bj 35b8_hs2_c TSC_MOE_HS=2 $S/35b8 --prompt 512 --gen 128 --runs 2
bj 35b8_mtp3_d_a X=0 $S/35b8 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
bj 35b8_mtp3_hs2_a TSC_MOE_HS=2 $S/35b8 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
tr() { local n=$1 m=$2; shift 2; env "$@" TSC_TRACE_FILE=$O/te_$n.txt timeout 60 $B/turbospark_trace bench --backend cuda -m $m --prompt 512 --gen 64 --runs 1 > $O/te_$n.log 2>&1; local rc=$?; tl "engine trace $n $rc"; return $rc; }
tr 35b8_d $S/35b8 X=0
tr 35b8_hs2 $S/35b8 TSC_MOE_HS=2
ls $O/te_*.txt > /dev/null 2>&1 && xz -T8 $O/te_*.txt
synth_shape 9b shapes/qwen3.5-9B.json
bj 9b_d_a X=0 $S/9b --prompt 512 --gen 128 --runs 2
bj 9b_d_b X=0 $S/9b --prompt 512 --gen 128 --runs 2
timeout 60 $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b.txt 2>&1; tl "cuda_bench 9b $?"
bj 9b_mtp3_d_a X=0 $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
synth_shape 35b shapes/qwen3.5-35B-A3B.json
bj 35b_d_a X=0 $S/35b --prompt 512 --gen 128 --runs 2
bj 35b_hs2_a TSC_MOE_HS=2 $S/35b --prompt 512 --gen 128 --runs 2
device_end
