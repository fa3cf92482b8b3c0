#!/bin/bash
# One device call for issue 12 item 4, eighth session (run from the
# repository root with dist-nvfp4b carried): the Hopper W4A16 decode with one
# block-wide ring (w4a16_decode_sm90.cu: a TMA bulk-copy producer warp, 8
# consumer warps) against w4a16.cu's per-warp rings (SWITCHYARD_W4A16_DECODE_RING=0,
# read once a process), cuBLAS bf16 timed in each bench process.
S=dist-nvfp4b/switchyard
L=$OUT/nvfp4_ring_h200.log
OLD="env SWITCHYARD_W4A16_DECODE_RING=0"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.sm --format=csv >> $L 2>&1
t0=$(date +%s)
step() { local lim=$1; shift; echo "=== [$(( $(date +%s) - t0 ))s] $*" >> $L; timeout $lim "$@" >> $L 2>&1; echo "=== rc $?" >> $L; }
late() { [ $(( $(date +%s) - t0 )) -gt $1 ]; }
step 30 $S parity --backend cuda --filter w4a16_gemm
step 15 $S bench --backend cuda --iters 20 --filter w4a16_gemm_decode
step 15 $OLD $S bench --backend cuda --iters 20 --filter w4a16_gemm_decode
step 30 $S bench-model --backend cuda --batch 1 --steps 32
step 10 $S bench-model --backend cuda --batch 1 --steps 32 --quant nvfp4
step 10 $OLD $S bench-model --backend cuda --batch 1 --steps 32 --quant nvfp4
late 100 || step 15 compute-sanitizer --tool memcheck $S parity --backend cuda --filter w4a16_gemm
late 110 || step 12 compute-sanitizer --tool racecheck $S parity --backend cuda --filter w4a16_gemm_decode
NCU="ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section SchedulerStats --section Occupancy"
# The first decode cases are 8192 x 8192 at m = 1 (the _ring entry) and m = 16 (_ring_m16).
for k in 'w4a16_gemm_decode_ring$' w4a16_gemm_decode_ring_m16; do
    late 128 || { echo "=== [$(( $(date +%s) - t0 ))s] ncu $k" >> $L
        timeout 10 $NCU -k regex:"$k" --launch-skip 2 --launch-count 1 $S bench --backend cuda --iters 5 --filter w4a16_gemm_decode >> $OUT/ncu_ring.txt 2>&1
        echo "=== rc $?" >> $L; }
done
late 140 || step 8 $OLD $S parity --backend cuda --filter w4a16_gemm_decode
echo "=== done [$(( $(date +%s) - t0 ))s]" >> $L
grep -E "^=== \[|^=== rc|w4a16_gemm_decode \| m=|^\| 1 \||passed|ERROR SUMMARY|hazard|FAIL|fail|panick" $L | grep -v "| pass |" | tail -60
grep -E "Duration|DRAM Throughput|Memory Throughput|Issued Warp|Active Warps Per|Eligible Warps|Registers|No Eligible|Stall|Achieved Occupancy" $OUT/ncu_ring.txt | head -40
