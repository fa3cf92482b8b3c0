#!/bin/bash
# Issue 13 item 5 device checks (first call, build ccf3b4a): parity, the CUDA moe test, attn_bench --moe
# (wgmma plan, then SWITCHYARD_WGMMA=0 for the mma.sync kernel), memcheck and
# racecheck over the filtered parity, ncu speed-of-light on the grouped GEMMs.
D=/tmp/dist-moe
mkdir -p $D
for f in switchyard attn_bench moe_test; do xz -dc dist-moe/$f.xz > $D/$f && chmod +x $D/$f; done
export SWITCHYARD_REQUIRE_CUDA=1 SWITCHYARD_CUDA_CACHE=/tmp/sy-cubins
S=$(date +%s)
step() { local name=$1 t=$2; shift 2; echo "== $name ($(( $(date +%s) - S ))s)" | tee -a $OUT/summary.txt; timeout $t "$@" > $OUT/$name.txt 2>&1; echo "rc=$?" >> $OUT/$name.txt; tail -n 3 $OUT/$name.txt >> $OUT/summary.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $OUT/smi.txt 2>&1
step parity 30 $D/switchyard parity --backend cuda --filter moe_grouped_gemm_bf16
step moe_test 30 $D/moe_test
step bench 35 $D/attn_bench --moe
step memcheck 40 compute-sanitizer --tool memcheck $D/switchyard parity --backend cuda --filter moe_grouped_gemm_bf16
SWITCHYARD_WGMMA=0 step bench_mma 20 $D/attn_bench --moe
R=$(( 140 - ($(date +%s) - S) ))
if [ $R -gt 30 ]; then
  step ncu $(( R - 20 )) ncu --section SpeedOfLight --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_hmma.sum -k regex:moe_grouped_gemm_wgmma -c 17 $D/attn_bench --moe
fi
R=$(( 143 - ($(date +%s) - S) ))
if [ $R -gt 10 ]; then step racecheck $R compute-sanitizer --tool racecheck $D/switchyard parity --backend cuda --filter moe_grouped_gemm_bf16; fi
