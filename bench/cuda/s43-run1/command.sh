#!/bin/bash
# session 43, device call 1 (pack s42a: the build of the engine as of 2601fa9, unchanged since; ringfloor of 1dc8e49,
# whose kernels are bc09d2f's byte for byte):
# 1. ringfloor's forms, nodep / nobytes included (never run): whether the ring was full at each gap;
# 2. the acceptance card's figures at the defaults (s41-run5's list), for whatever card comes;
# 3. ncu with stall sampling of the 35B-A3B-8L's MoE kernels. Why: in session 38's engine trace (s38-run1,
#    te_35b8, H100) every block of the routed down (k_q4dp_moe COLS: 2048 rows x 4608 columns, ~5.3 MB) takes
#    8.0-9.5 us from its PDL release to its end, where the GDN out_proj (k_q4dp DX: 2048 x 4096, ~4.7 MB) takes
#    1.4-1.8 us and the routed gate/up (~10 MB) 6-8. Floors of the down: its bytes ~1.8 us at the H100's copy rate;
#    its staging (each of 256 blocks makes silu(g) * u's digits of all 4608 columns: 36 KB from L2 a block, 2 passes
#    of 2 words a thread) ~1-2 us by count. Where the other ~5 us go decides the next change.
PACK=.gpu/s42a/pack.tar.xz . bench/cuda/device_env.sh
timeout 60 .gpu/s43a/ringfloor > $O/ringfloor.txt 2>&1; tl "ringfloor $?"
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
VN=(d); VE=(X=0)
ab 9b $S/9b 2 --prompt 512 --gen 128 --runs 2
ab 35b8 $S/35b8 2 --prompt 512 --gen 128 --runs 2
timeout 60 $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b.txt 2>&1; tl "cuda_bench 9b $?"
ab 9b_mtp3 $S/9b 1 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
# k_q4dp_moe<ND, U, EM, SHR>: the down <1, 2, 2 (COLS), 0>, the gate/up with the shared rows <1, 1, 1 (ROWS), 1>;
# the GDN out_proj for contrast (k_q4dp's DX form, as s41-run3's dx)
pm() { prof "$1" "$2" "$3" "$4" $S/35b8; }
pm moedown 'k_q4dp_moe<.int.1, .int.2, .int.2, .bool.0>' 40 2
pm moegu 'k_q4dp_moe<.int.1, .int.1, .int.1, .bool.1>' 40 2
pm dx35 'k_q4dp<.int.1, .int.1, .int.2, .bool.1, .bool.0, .bool.1>' 40 2
device_end
