#!/bin/bash
# One device call for the NVFP4 decode kernel (issue 12 item 4).
B=dist-nvfp4/switchyard
L=$OUT/nvfp4_decode_h200.log
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.sm --format=csv >> $L 2>&1
t0=$(date +%s)
step() { local lim=$1; shift; echo "=== [$(( $(date +%s) - t0 ))s] $*" >> $L; timeout $lim "$@" >> $L 2>&1; echo "=== rc $?" >> $L; }
step 50 $B parity --backend cuda --filter w4a16
step 45 $B bench --backend cuda --iters 20 --filter w4a16_gemm_decode
step 60 $B bench-model --backend cuda --batch 1 --steps 32
step 45 $B bench-model --backend cuda --batch 1 --steps 32 --quant nvfp4
step 45 compute-sanitizer --tool memcheck $B parity --backend cuda --filter w4a16_gemm_decode
N=$OUT/ncu_w4a16_decode.txt
echo "=== [$(( $(date +%s) - t0 ))s] ncu" >> $L
timeout 40 ncu --clock-control none -k regex:w4a16_gemm_decode --launch-count 1 --section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis $B bench --backend cuda --iters 1 --filter w4a16_gemm_decode > $N 2>&1
echo "=== rc $? [$(( $(date +%s) - t0 ))s]" >> $L
