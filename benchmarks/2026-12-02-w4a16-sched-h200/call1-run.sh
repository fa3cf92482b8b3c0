#!/bin/bash
# Issue 13 item 3, eighth session: the W4A16 wgmma kernel with its decode in one straight block (v2) against the committed kernel (old).
set -u
D=dist-w4c
export SWITCHYARD_REQUIRE_CUDA=1 SWITCHYARD_CUDA_CACHE=/tmp/sy-cubins
SUM=$OUT/summary.txt
LIMIT=${LIMIT:-170}
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
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv,noheader | tee -a "$SUM"
step tests 25 $OUT/tests.txt $D/gemm --test-threads 1 --nocapture w4a16
step parity 12 $OUT/parity.txt $D/switchyard parity --backend cuda --filter w4a16_gemm_n128
step bench_old 38 $OUT/bench_old.txt $D/gemm_bench_old --w4a16-prefill
step bench_v2 38 $OUT/bench_v2.txt $D/gemm_bench_v2 --w4a16-prefill
step memcheck 10 $OUT/memcheck.txt compute-sanitizer --tool memcheck $D/switchyard parity --backend cuda --filter w4a16_gemm_n128_m128
step racecheck 12 $OUT/racecheck.txt compute-sanitizer --tool racecheck $D/switchyard parity --backend cuda --filter w4a16_gemm_n128_m128
NCU="ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section SourceCounters -k regex:w4a16_gemm_wgmma --launch-skip 3 --launch-count 1"
SWITCHYARD_BENCH_W4_SHAPE=4096x8192x8192 step ncu_4096 16 $OUT/ncu_4096x8192x8192.txt $NCU $D/gemm_bench_v2 --w4a16-prefill
echo
grep -E "test result|FAILED|panicked|NMSE" $OUT/tests.txt | head -20
grep -E "passed|failed|FAIL" $OUT/parity.txt | tail -3
for f in bench_old bench_v2; do echo "-- $f"; grep -E "^\| (512|4096) \| [0-9]+ \| [0-9]+ \| (w4a16_gemm_n128_m128|cuBLAS)|worst NMSE|rror" $OUT/$f.txt; done
grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed" $OUT/memcheck.txt $OUT/racecheck.txt
for f in $OUT/ncu_*.txt; do echo "-- $f"; grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|Issue Slots Busy|Issued Ipc|Warp Cycles Per Issued|Tensor|Stall" $f | head -24; done
