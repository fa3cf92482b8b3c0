#!/bin/bash
# W4A16 wgmma: v2 (straight-line slice decode) against v3 (a commit group per k16 step, wait_group 4, the next slice decoded a step at a time).
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
for shape in 4096x8192x8192 512x5376x21504 4096x8192x8192; do
  for r in 1; do
    SWITCHYARD_BENCH_W4_SHAPE=$shape step v2_${shape}_$r 12 $OUT/bench.txt $D/gemm_bench_v2 --w4a16-prefill
    SWITCHYARD_BENCH_W4_SHAPE=$shape step v3_${shape}_$r 12 $OUT/bench.txt $D/gemm_bench_v3 --w4a16-prefill
  done
done
#step v3_all 34 $OUT/bench_v3_all.txt $D/gemm_bench_v3 --w4a16-prefill
M="--metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum"
#SWITCHYARD_BENCH_W4_SHAPE=4096x8192x8192 step ncu_v3 25 $OUT/ncu_v3.txt ncu --clock-control none --section SpeedOfLight --section WarpStateStats $M -k regex:w4a16_gemm_wgmma --launch-skip 3 --launch-count 1 $D/gemm_bench_v3 --w4a16-prefill
echo
grep -E "^\| (512|4096) \| [0-9]+ \| [0-9]+ \| (w4a16_gemm_n128_m128|cuBLAS)|== |NMSE" $OUT/bench.txt | sed 's|/root/out/||'
#grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|Issued Ipc|Warp Cycles Per Issued|stalled|inst_executed" $OUT/ncu_v3.txt | awk '$NF+0 > 0.05 || /Duration|Freq|Through|Ipc|Cycles|inst/' | head -30
