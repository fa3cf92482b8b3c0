#!/bin/bash
# One device call for issue 12 item 4, second pass (run from the repository
# root with dist-nvfp4b carried): the persistent W4A16 decode plan (four-tile
# ring, two blocks an SM) and the stacked NVFP4 q/k/v, against the build
# before them, in one process each with cuBLAS bf16 as the yardstick.
#   sy-before   e597b3d's w4a16 / model files
#   sy-after    585cd4d + 24778b3 (4 stages x 2 blocks an SM, q/k/v stacked)
#   sy-k3       sy-after with 3 stages x 3 blocks an SM (A/B of the ring depth)
#   sy-nostack  sy-after with bench-model's q/k/v one linear each (A/B of the stack)
D=dist-nvfp4b
L=$OUT/nvfp4_persistent_h200.log
(cd $D && for f in *.xz; do xz -d -k -f "$f"; done; chmod +x sy-* model_generate)
A=$D/sy-after B=$D/sy-before K3=$D/sy-k3 NS=$D/sy-nostack
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.sm --format=csv >> $L 2>&1
t0=$(date +%s)
step() { local lim=$1; shift; echo "=== [$(( $(date +%s) - t0 ))s] $*" >> $L; timeout $lim "$@" >> $L 2>&1; echo "=== rc $?" >> $L; }
late() { [ $(( $(date +%s) - t0 )) -gt $1 ]; }
step 45 $A parity --backend cuda --filter w4a16_gemm
step 25 $A bench --backend cuda --iters 20 --filter w4a16_gemm_decode
step 25 $B bench --backend cuda --iters 20 --filter w4a16_gemm_decode
for s in $A $B; do step 20 $s bench-model --backend cuda --batch 1 --steps 32; done
for s in $A $B $A $NS; do step 20 $s bench-model --backend cuda --batch 1 --steps 32 --quant nvfp4; done
step 40 compute-sanitizer --tool memcheck $A parity --backend cuda --filter w4a16_gemm_decode
step 50 $D/model_generate cuda
late 150 || step 25 $K3 bench --backend cuda --iters 20 --filter w4a16_gemm_decode
late 160 || step 20 $K3 bench-model --backend cuda --batch 1 --steps 32 --quant nvfp4
for s in $A $B; do late 170 || step 20 $s bench-model --backend cuda --batch 16 --steps 16 --quant nvfp4; done
NCU="ncu --clock-control none --section SpeedOfLight --section Occupancy --section SchedulerStats --section WarpStateStats --section MemoryWorkloadAnalysis"
for k in 'w4a16_gemm_decode$' w4a16_gemm_decode_m16; do
    late 175 || { echo "=== [$(( $(date +%s) - t0 ))s] ncu $k" >> $L
        timeout 20 $NCU -k regex:"$k" --launch-skip 3 --launch-count 1 $A bench --backend cuda --iters 1 --filter w4a16_gemm_decode >> $OUT/ncu_decode_after.txt 2>&1
        echo "=== rc $?" >> $L; }
done
late 190 || { echo "=== [$(( $(date +%s) - t0 ))s] ncu step nvfp4" >> $L
    timeout 45 ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
        --csv --page raw $A bench-model --backend cuda --batch 1 --steps 1 --profile-timed-steps --quant nvfp4 > $OUT/ncu_step_nvfp4_after.csv 2>&1
    echo "=== rc $?" >> $L
    python3 scripts/ncu_summary.py $OUT/ncu_step_nvfp4_after.csv --steps 1 --copy-gbs 4250 > $OUT/ncu_step_nvfp4_after.md 2>&1; }
echo "=== done [$(( $(date +%s) - t0 ))s]" >> $L
grep -E "^=== \[|vs cuBLAS|w4a16_gemm_decode \||^\| (1|16) \||passed|ERROR SUMMARY|test result" $L | tail -80
