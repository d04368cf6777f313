#!/bin/bash
# session 49, device call 1 (session 48's prepared s48-run5, plus SZ and CS). Pack s49b: the build of this commit and its
# trace turbospark (make -j2 BUILD=build-cuda CUDA=1 WERROR=-Werror all; make -j2 BUILD=build-cuda-trace CUDA=1
# EXTRA_NVCC_FLAGS=-DTSC_TRACE build-cuda-trace/turbospark; PACK_MAIN="turbospark ts_test" bash bench/cuda/pack.sh
# s49b; slim.sh out-all s49-run1, then the fixtures' and the bundled model's weights removed too, for room: this
# call runs no engine test).
# 1. Bits first: the attention tests (their loop runs SZ and CS on and off against GC and the
#    CPU; attn_pieces_by_row_length has a row of 282 pieces, which CS's combine walks in two chunks).
# 2. One interleaved A/B of six forms on both shapes, 2 rounds (cut from 3, and U's tests dropped, after the
#    session's refused starts left ~460 s of device time for a start and this command):
#    d      the default;
#    nbu    TSC_GDN_NBU=1 (N's instances without their 64-register bound: 74-76 registers, no spill, against 64
#           with 4 bytes of spill). Is it D's spill or its registers that cost? Prediction: +-0.3%.
#    sz     TSC_ATTN_SZ=1 (attn.cu's SZ: the split's static shared arrays sized for the call's query heads a KV
#           head: 18,624 -> 4,656 bytes a block on the 9B, 9,312 on the 35B-A3B). Prediction: +0-0.5%.
#    apad8  TSC_ATTN_PAD=8192 (the combine's launch padded by 8 KB: does its 8,336 bytes of static arrays, sized
#           for 1,024 pieces, cost?). Prediction: under 0.3% either way.
#    cs     TSC_ATTN_CS=1 (attn.cu's CS: those arrays for 256 pieces, 8,336 -> 2,192 bytes). Prediction: as apad8's
#           effect, reversed and a quarter its size.
#    szcs   both SZ and CS.
# 3. The engine's traces at the defaults (9B, 35B-A3B-8L), which failed in s48-run2 with an empty message:
#    backend.cu's sync_into now carries the context's message. If it fails again, once more with the modules
#    loaded eagerly (CUDA_MODULE_LOADING=EAGER: the trace build's rings are 20 MB of static device memory a unit).
PACK=.gpu/s49b/pack.tar.xz . bench/cuda/device_env.sh
timeout 120 $B/ts_test cuda.attn_short_parity_and_row_exact cuda.attn_long_split_parity_and_row_exact cuda.attn_device_pos_big_pieces cuda.attn_pieces_by_row_length cuda.attn_same_pos_rows cuda.attn_digits_same_as_staging > $O/t_attn.log 2>&1; tl "attn tests $?"
TSC_ATTN_SZ=1 TSC_ATTN_CS=1 timeout 120 $B/ts_test cuda.attn_short_parity_and_row_exact cuda.attn_device_pos_big_pieces cuda.attn_same_pos_rows cuda.attn_digits_same_as_staging > $O/t_attn_sz.log 2>&1; tl "attn tests under SZ and CS $?"
tr() { local n=$1 m=$2; shift 2; env "$@" TSC_TRACE_FILE=$O/te_$n.txt timeout 60 $B/turbospark_trace bench --backend cuda -m $m --prompt 512 --gen 64 --runs 1 > $O/te_$n.log 2>&1; local rc=$?; tl "engine trace $n $rc"; return $rc; }
VN=(d sz cs szcs apad8 nbu); VE=(X=0 TSC_ATTN_SZ=1 TSC_ATTN_CS=1 "TSC_ATTN_SZ=1 TSC_ATTN_CS=1" TSC_ATTN_PAD=8192 TSC_GDN_NBU=1)
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
ab 35b8 $S/35b8 2 --prompt 512 --gen 128 --runs 2
synth_shape 9b shapes/qwen3.5-9B.json
ab 9b $S/9b 2 --prompt 512 --gen 128 --runs 2
tr 35b8 $S/35b8 X=0 || tr 35b8_eager $S/35b8 CUDA_MODULE_LOADING=EAGER
tr 9b $S/9b X=0
ls $O/te_*.txt > /dev/null 2>&1 && xz -T8 $O/te_*.txt
device_end
