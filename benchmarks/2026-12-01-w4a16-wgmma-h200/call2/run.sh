#!/bin/bash
# Issue 13 item 3 device checks (second call): logs under $OUT.
set -u
D=dist-w4
export SWITCHYARD_REQUIRE_CUDA=1 SWITCHYARD_CUDA_CACHE=/tmp/sy-cubins
SUM=$OUT/summary.txt
step() {
    local name=$1 secs=$2 file=$3; shift 3
    local t0=$SECONDS
    echo "== $name: $*" >> "$file"
    timeout "$secs" "$@" >> "$file" 2>&1
    local rc=$?
    echo "$name: rc=$rc ($((SECONDS - t0)) s)" | tee -a "$SUM"
}
xz -dk $D/switchyard.xz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$SUM"
step tests 30 $OUT/tests.txt $D/gemm --test-threads 1 --nocapture
step parity 15 $OUT/parity.txt $D/switchyard parity --backend cuda --filter w4a16
step memcheck 15 $OUT/memcheck.txt compute-sanitizer --tool memcheck $D/gemm w4a16 --test-threads 1
step bench 40 $OUT/bench.txt $D/gemm_bench --w4a16-prefill
left=$((142 - SECONDS))
[ $left -gt 20 ] && step ncu $left $OUT/ncu.txt ncu --launch-skip 65 --launch-count 1 -k w4a16_gemm_wgmma --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section MemoryWorkloadAnalysis $D/gemm_bench --w4a16-prefill
echo; grep -E "test result|FAILED|panicked|NMSE|passed" $OUT/tests.txt | head -20
grep -E "passed|failed|FAIL" $OUT/parity.txt | tail -3
grep -E "^\| (512|4096) |worst NMSE|rror" $OUT/bench.txt
grep -E "ERROR SUMMARY|test result" $OUT/memcheck.txt
grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Cache Throughput|Issue Slots Busy|Issued Ipc|Executed Ipc|No Eligible|Shared Memory|Warp Cycles Per Issued|Pipe" $OUT/ncu.txt 2>/dev/null | head -30
