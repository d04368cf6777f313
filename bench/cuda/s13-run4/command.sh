#!/bin/bash
# session 13, device call 4: the tensor-core products on tiny-dense's shapes (kernel test), and the
# engine's prompt-chunk products of tiny-dense INT4 against the row kernels (TSC_GEMM_CHECK)
PACK=.gpu/s13/pack.tar.xz . bench/cuda/device_env.sh
timeout 60 $B/ts_test cuda.gemm_prefill_products > $O/gemm_test.log 2>&1; tl "gemm test $?"
$B/turbospark convert tests/fixtures/tiny-dense $S/td4 --bits 4 > /dev/null 2>&1
TSC_GEMM_CHECK=1 $B/turbospark bench --backend cuda -m $S/td4 --prompt 64 --gen 2 --runs 1 > $O/check_td4.txt 2>&1; tl "check td4 $?"
device_end
