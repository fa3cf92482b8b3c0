#!/bin/bash
# Issue 13 item 5, ping-pong call: parity on the ping-pong kernel (the
# default) and on the cooperative ones (SWITCHYARD_MOE_PINGPONG=0), the CUDA
# moe test (both kernels, bit-identical), attn_bench --moe with both kernels
# in turn (each with its cuBLAS yardsticks), memcheck and racecheck over the
# filtered parity, ncu on the ping-pong kernel (last gate_up launch, first
# down launch).
D=/tmp/dist-moe2
mkdir -p $D
for f in switchyard attn_bench moe_test; do xz -dc dist-moe2/$f.xz > $D/$f && chmod +x $D/$f; done
export SWITCHYARD_REQUIRE_CUDA=1 SWITCHYARD_CUDA_CACHE=/tmp/sy-cubins
S=$(date +%s)
left() { echo $(( $1 - ($(date +%s) - S) )); }
step() { local name=$1 t=$2; shift 2; echo "== $name ($(( $(date +%s) - S ))s)" >> $OUT/summary.txt; timeout $t "$@" > $OUT/$name.txt 2>&1; echo "rc=$?" >> $OUT/$name.txt; tail -n 3 $OUT/$name.txt >> $OUT/summary.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $OUT/smi.txt 2>&1
step parity 30 $D/switchyard parity --backend cuda --filter moe_grouped_gemm_bf16
SWITCHYARD_MOE_PINGPONG=0 step parity_coop 20 $D/switchyard parity --backend cuda --filter moe_grouped_gemm_bf16
step moe_test 25 $D/moe_test
step bench 25 $D/attn_bench --moe
SWITCHYARD_MOE_PINGPONG=0 step bench_coop 25 $D/attn_bench --moe
R=$(left 120); if [ $R -gt 12 ]; then step bench_again $(( R < 25 ? R : 25 )) $D/attn_bench --moe; fi
step memcheck 40 compute-sanitizer --tool memcheck $D/switchyard parity --backend cuda --filter moe_grouped_gemm_bf16
R=$(left 165); if [ $R -gt 15 ]; then step racecheck $R compute-sanitizer --tool racecheck $D/switchyard parity --backend cuda --filter moe_grouped_gemm_bf16; fi
R=$(left 205); if [ $R -gt 12 ]; then
  step ncu $R ncu --section SpeedOfLight --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,dram__bytes_read.sum,lts__t_sector_hit_rate.pct -k regex:wgmma_pp_n176 --launch-skip 15 --launch-count 2 $D/attn_bench --moe
fi
echo "== done ($(( $(date +%s) - S ))s)" >> $OUT/summary.txt
cat $OUT/summary.txt
for f in bench bench_coop bench_again; do echo "-- $f"; grep -E "^\| (grouped bf16|cuBLAS)" $OUT/$f.txt; done
grep -E "Duration|L2 Cache Throughput|DRAM Throughput|hmma_cycles|moe_grouped" $OUT/ncu.txt 2>/dev/null
