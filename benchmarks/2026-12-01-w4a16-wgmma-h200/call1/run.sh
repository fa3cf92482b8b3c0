#!/bin/bash
# Issue 13 item 3, first device call (build with the shared-memory dequantised-tile kernels:
# gemm_bench_m256 = 256 x 128 tiles, gemm_bench_n256 = 128 x 256 tiles, the plan's pick
# compiled in; the test and CLI binaries with the 256 x 128 pick).
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
[ -f $D/switchyard ] || xz -dk $D/switchyard.xz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$SUM"
step tests 35 $OUT/tests.txt $D/gemm w4a16 --test-threads 1 --nocapture
step parity 20 $OUT/parity.txt $D/switchyard parity --backend cuda --filter w4a16
step bench_m256 35 $OUT/bench_m256.txt $D/gemm_bench_m256 --w4a16-prefill
step bench_n256 35 $OUT/bench_n256.txt $D/gemm_bench_n256 --w4a16-prefill
step memcheck 25 $OUT/memcheck.txt compute-sanitizer --tool memcheck $D/gemm w4a16 --test-threads 1
