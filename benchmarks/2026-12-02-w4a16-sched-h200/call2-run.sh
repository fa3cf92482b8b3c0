#!/bin/bash
# W4A16 wgmma: v2 (straight-line decode) against the same kernel with the decode replaced by one LOP (nodecode: wrong values, same loads and wgmma), twice each, plus ncu stall reasons.
set -u
D=dist-w4c
export SWITCHYARD_REQUIRE_CUDA=1 SWITCHYARD_CUDA_CACHE=/tmp/sy-cubins
SUM=$OUT/summary.txt
LIMIT=${LIMIT:-150}
step() {
    local name=$1 secs=$2 file=$3; shift 3
    local left=$((LIMIT - SECONDS))
    [ $left -lt 6 ] && { echo "$name: skipped (no time left)" | tee -a "$SUM"; return; }
    [ $secs -gt $left ] && secs=$left
    local t0=$SECONDS
    echo "== $name: $*" >> "$file"
    timeout "$secs" "$@" >> "$file" 2>&1
    local rc=$?
    echo "$name: rc=$rc ($((SECONDS - t0)) s)" | tee -a "$SUM"
}
export SWITCHYARD_BENCH_W4_SHAPE=4096x8192x8192
for r in 1 2; do
  step v2_$r 12 $OUT/bench.txt $D/gemm_bench_v2 --w4a16-prefill
  step nd_$r 12 $OUT/bench.txt $D/gemm_bench_nodecode --w4a16-prefill
done
M="--metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_uniform.sum,smsp__inst_executed.sum"
NCU="ncu --clock-control none --section SpeedOfLight --section WarpStateStats $M -k regex:w4a16_gemm_wgmma --launch-skip 3 --launch-count 1"
step ncu_v2 25 $OUT/ncu_v2.txt $NCU $D/gemm_bench_v2 --w4a16-prefill
step ncu_nd 25 $OUT/ncu_nd.txt $NCU $D/gemm_bench_nodecode --w4a16-prefill
step ncu_src 30 $OUT/ncu_src_log.txt ncu --clock-control none --section SourceCounters --section WarpStateStats -k regex:w4a16_gemm_wgmma --launch-skip 3 --launch-count 1 -o /tmp/src $D/gemm_bench_v2 --w4a16-prefill
step ncu_page 20 $OUT/ncu_src.csv ncu -i /tmp/src.ncu-rep --page source --print-source sass --csv
xz -9 $OUT/ncu_src.csv 2>/dev/null
echo
grep -E "^\| 4096 \| [0-9]+ \| [0-9]+ \| (w4a16_gemm_n128_m128|cuBLAS)|== " $OUT/bench.txt
for f in $OUT/ncu_v2.txt $OUT/ncu_nd.txt; do echo "-- $f"; grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|Issued Ipc|Warp Cycles Per Issued|stalled|gmma|inst_executed" $f | awk '$NF+0 > 0.05 || /Duration|Freq|Through|Ipc|Cycles|gmma|inst/' | head -40; done
ls -la $OUT
