#!/bin/bash
# Issue 13 item 5, down GEMM call (seventh session): four builds of
# moe_grouped_gemm_wgmma_pp_n176 (MG_PP_FLAGS in moe_sm90.cu): base = the
# committed kernel (0); v1 = balanced walk (slots of two m64 row blocks);
# v3 = v1 + turn (zero before the turn's bar.sync, hand-over at the last
# commit); v7 = v3 + L2 prefetch of the block's next weight slice.
# Parity (replay identity), attn_bench --moe (cuBLAS yardsticks in the same
# process) interleaved twice (a third round if time is left), the moe test,
# memcheck + racecheck on the variants, ncu (warp states, schedulers, SOL
# and the last call's metrics) on the first down launch of each.
D=/tmp/dist-moe4
mkdir -p $D
for v in base v1 v3 v7; do mkdir -p $D/$v; for f in switchyard attn_bench moe_test; do xz -dc dist-moe4/$v/$f.xz > $D/$v/$f && chmod +x $D/$v/$f; done; done
export SWITCHYARD_REQUIRE_CUDA=1 SWITCHYARD_CUDA_CACHE=/tmp/sy-cubins
S=$(date +%s)
el() { echo $(( $(date +%s) - S )); }
step() { local file=$1 label=$2 t=$3 v=$4; shift 4; echo "=== $label [$v] ($(el)s)" >> $OUT/$file.txt
  timeout $t "$@" >> $OUT/$file.txt 2>&1; RC=$?; echo "rc=$RC" >> $OUT/$file.txt; echo "== $label [$v] rc=$RC ($(el)s)" >> $OUT/summary.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >> $OUT/summary.txt 2>&1
V="base v1 v3 v7"
for v in $V; do step check "parity" 30 $v $D/$v/switchyard parity --backend cuda --filter moe_grouped_gemm_bf16; done
for v in base v1 v3 v7; do step bench "bench run 1" 12 $v $D/$v/attn_bench --moe; done
for v in v7 v3 v1 base; do step bench "bench run 2" 12 $v $D/$v/attn_bench --moe; done
for v in $V; do [ $(el) -lt 80 ] && step check "moe_test" 12 $v $D/$v/moe_test; done
for v in v1 v3 v7; do [ $(el) -lt 88 ] && step check "memcheck" 15 $v compute-sanitizer --tool memcheck $D/$v/switchyard parity --backend cuda --filter moe_grouped_gemm_bf16; done
for v in v3 v7 v1; do [ $(el) -lt 96 ] && step check "racecheck" 15 $v compute-sanitizer --tool racecheck $D/$v/switchyard parity --backend cuda --filter moe_grouped_gemm_bf16; done
for v in v3 base v7 v1; do
  [ $(el) -lt 118 ] && step ncu "ncu down" 15 $v ncu --clock-control none --section WarpStateStats --section SchedulerStats --section SpeedOfLight \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,lts__t_sectors.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed \
    --page raw -k regex:wgmma_pp_n176 --launch-skip 16 --launch-count 1 $D/$v/attn_bench --moe
done
for v in base v1 v3 v7; do [ $(el) -lt 136 ] && step bench "bench run 3" 10 $v $D/$v/attn_bench --moe; done
echo "== done ($(el)s)" >> $OUT/summary.txt
cat $OUT/summary.txt
grep -E "replayed|passed|failed|test result|NMSE vs|ERROR SUMMARY|RACECHECK SUMMARY|^===|panicked" $OUT/check.txt
grep -E "^===|^\| (grouped bf16 (gate_up|down)|cuBLAS)" $OUT/bench.txt
grep -E "^===|gpu__time_duration.sum|dram__bytes_read.sum |hit_rate.pct|hmma_cycles_active.avg.pct|lts__t_sectors.avg.pct|dram__throughput.avg.pct|cycles_elapsed.avg.per_second|issue_stalled_.*per_issue_active|smsp__issue_active.avg.per_cycle_active|warps_eligible.avg.per_cycle|warps_active.avg.per_cycle|smsp__average_warp_latency_per_inst_issued" $OUT/ncu.txt | grep -vE " 0(\.0+)?$"
