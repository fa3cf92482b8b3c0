#!/bin/bash
# Issue 13 item 5 device checks, second call: parity (256-row tiles on, the
# default, and SWITCHYARD_MOE_WIDE=0), the CUDA moe test (both), attn_bench
# --moe (both heights, cuBLAS yardsticks), memcheck and racecheck over the
# filtered parity, ncu on the 256-row kernel.
D=/tmp/dist-moe
mkdir -p $D
for f in switchyard attn_bench moe_test; do xz -dc dist-moe/$f.xz > $D/$f && chmod +x $D/$f; done
export SWITCHYARD_REQUIRE_CUDA=1 SWITCHYARD_CUDA_CACHE=/tmp/sy-cubins
S=$(date +%s)
step() { local name=$1 t=$2; shift 2; echo "== $name ($(( $(date +%s) - S ))s)" >> $OUT/summary.txt; timeout $t "$@" > $OUT/$name.txt 2>&1; echo "rc=$?" >> $OUT/$name.txt; tail -n 3 $OUT/$name.txt >> $OUT/summary.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/smi.txt 2>&1
step parity 30 $D/switchyard parity --backend cuda --filter moe_grouped_gemm_bf16
SWITCHYARD_MOE_WIDE=0 step parity_narrow 30 $D/switchyard parity --backend cuda --filter moe_grouped_gemm_bf16
step moe_test 30 $D/moe_test
step bench 35 $D/attn_bench --moe
step memcheck 40 compute-sanitizer --tool memcheck $D/switchyard parity --backend cuda --filter moe_grouped_gemm_bf16
R=$(( 110 - ($(date +%s) - S) ))
if [ $R -gt 15 ]; then step racecheck $R compute-sanitizer --tool racecheck $D/switchyard parity --backend cuda --filter moe_grouped_gemm_bf16; fi
R=$(( 143 - ($(date +%s) - S) ))
if [ $R -gt 12 ]; then
  step ncu $R ncu --section SpeedOfLight --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,dram__bytes_read.sum,lts__t_sector_hit_rate.pct -k regex:wgmma_m256n176 -c 18 $D/attn_bench --moe
fi
echo "== done ($(( $(date +%s) - S ))s)" >> $OUT/summary.txt
cat $OUT/summary.txt
grep -E "^\| (grouped|cuBLAS)" $OUT/bench.txt
