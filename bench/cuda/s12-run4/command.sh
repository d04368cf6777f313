#!/bin/bash
# session 12, device call 4: ncu of k_q4mm (TSC_Q4MM=1) against k_q4dp on the 9B products, one row
O=$OUT/x; mkdir -p $O; T0=$(date +%s)
tl() { echo "$(( $(date +%s) - T0 )) s: $*" >> $O/timeline.txt; }
tar -C /tmp -xJf .gpu/s12/pack.tar.xz; B=/tmp/b
export LD_LIBRARY_PATH=$B/lib NCCL_NVLS_ENABLE=0
tl start
SEC="--section SpeedOfLight --section MemoryWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section LaunchStats --section Occupancy --section InstructionStats"
timeout 200 ncu $SEC --kernel-name regex:k_q4mm --launch-count 12 env TSC_Q4MM=1 $B/cuda_bench --shape 9b --mlx --digits 1 --prof > $O/ncu_mm.txt 2>$O/ncu_mm.err; tl "ncu mm $?"
timeout 200 ncu $SEC --kernel-name regex:k_q4dp --launch-count 12 $B/cuda_bench --shape 9b --mlx --digits 1 --prof > $O/ncu_dp.txt 2>$O/ncu_dp.err; tl "ncu dp $?"
timeout 100 ncu --metrics l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,smsp__inst_executed.sum,dram__bytes_read.sum,gpu__time_duration.sum --kernel-name regex:"k_q4mm|k_q4dp" --launch-count 30 env TSC_Q4MM=1 $B/cuda_bench --shape 9b --mlx --digits 1 --prof > $O/ncu_metrics_mm.txt 2>&1; tl "metrics mm $?"
timeout 100 ncu --metrics l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,smsp__inst_executed.sum,dram__bytes_read.sum,gpu__time_duration.sum --kernel-name regex:"k_q4dp" --launch-count 30 $B/cuda_bench --shape 9b --mlx --digits 1 --prof > $O/ncu_metrics_dp.txt 2>&1; tl "metrics dp $?"
tl end
cd $OUT && tar czf r.tgz x && rm -rf x
