#!/bin/bash
# Issue 13 item 5, tile-order call: the ping-pong kernel's variants
# (SWITCHYARD_MOE_PP; "default" = unset: pairs of neighbouring tiles + L2
# hints h2; strided = the kernel before, the A/B baseline; pairs; pairs_h1;
# strided_h2; mc = 2-block clusters with the weight slice multicast).
# Parity (replay identity) on every variant, attn_bench --moe (each with its
# cuBLAS yardsticks) twice on each, the moe test and memcheck on every
# variant, racecheck on default and mc, ncu on the first two down launches
# of each. Few output files: the device tool returns at most 8.
D=/tmp/dist-moe3
mkdir -p $D
for f in switchyard attn_bench moe_test; do xz -dc dist-moe3/$f.xz > $D/$f && chmod +x $D/$f; done
export SWITCHYARD_REQUIRE_CUDA=1 SWITCHYARD_CUDA_CACHE=/tmp/sy-cubins
S=$(date +%s)
el() { echo $(( $(date +%s) - S )); }
# step FILE LABEL TIMEOUT VARIANT cmd...: appends to $OUT/FILE.txt, a line to summary.
step() { local file=$1 label=$2 t=$3 v=$4; shift 4; echo "=== $label [SWITCHYARD_MOE_PP=$v] ($(el)s)" >> $OUT/$file.txt
  if [ "$v" = default ]; then timeout $t "$@" >> $OUT/$file.txt 2>&1; else SWITCHYARD_MOE_PP=$v timeout $t "$@" >> $OUT/$file.txt 2>&1; fi
  RC=$?; echo "rc=$RC" >> $OUT/$file.txt; echo "== $label [$v] rc=$RC ($(el)s)" >> $OUT/summary.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >> $OUT/summary.txt 2>&1
V=""
for v in default strided pairs pairs_h1 strided_h2 mc; do
  step check "parity" 40 $v $D/switchyard parity --backend cuda --filter moe_grouped_gemm_bf16
  [ $RC -eq 0 ] && V="$V $v"
done
echo "variants passing parity:$V" >> $OUT/summary.txt
R=$(echo $V | tr ' ' '\n' | tac | tr '\n' ' ')
for v in $V; do step bench "bench run 1" 15 $v $D/attn_bench --moe; done
for v in $R; do step bench "bench run 2" 15 $v $D/attn_bench --moe; done
for v in $V; do [ $(el) -lt 110 ] && step check "moe_test" 15 $v $D/moe_test; done
for v in $V; do [ $(el) -lt 125 ] && step check "memcheck" 20 $v compute-sanitizer --tool memcheck $D/switchyard parity --backend cuda --filter moe_grouped_gemm_bf16; done
for v in default mc; do [ $(el) -lt 135 ] && step check "racecheck" 25 $v compute-sanitizer --tool racecheck $D/switchyard parity --backend cuda --filter moe_grouped_gemm_bf16; done
for v in default strided mc pairs pairs_h1 strided_h2; do
  [ $(el) -lt 176 ] && step ncu "ncu" 14 $v ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,lts__t_sectors.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed -k regex:wgmma_pp_n176 --launch-skip 16 --launch-count 2 $D/attn_bench --moe
done
echo "== done ($(el)s)" >> $OUT/summary.txt
cat $OUT/summary.txt
grep -E "passed|test result|ERROR SUMMARY|RACECHECK SUMMARY|^===|panicked" $OUT/check.txt
grep -E "^===|^\| (grouped bf16 (gate_up|down)|cuBLAS)" $OUT/bench.txt
grep -E "^===|moe_grouped|gpu__time|dram__bytes|hit_rate|hmma|lts__t_sectors|dram__throughput" $OUT/ncu.txt
