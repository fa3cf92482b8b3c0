#!/bin/bash
# Issue 14 item 5, eighth session, one call: the coopmat tile kernels
# (SWITCHYARD_WGSL_COOPMAT_TILE = 8w, 4w, 4w-db, 4w-db64, 4w-dd): per variant
# the coopmat tests (parity incl. range stress and K = 1024 / 1032, per-pass
# GPU times at 4096 x 8192^2), then the CUDA yardstick, then the wgpu bench of
# each variant, then wgpu parity of every dense GEMM entry (replay identity).
set -u
START=$(date +%s)
left() { echo $(( 145 - ($(date +%s) - START) )); }
source .device-vk/env.sh
D=dist-coop2
cd "$OUT" || exit 1
W=$OLDPWD/$D
timeout 10 $W/switchyard info --backend wgpu > info.txt 2>&1
grep -E "cooperative_matrix:|loop_bounding|subgroups:" info.txt
VARIANTS="8w 4w 4w-db 4w-db64 4w-dd"
for v in $VARIANTS; do
  [ "$(left)" -gt 20 ] || { echo "[$v] tests skipped (time)"; continue; }
  SWITCHYARD_WGSL_COOPMAT_TILE=$v SWITCHYARD_REQUIRE_WGPU=1 SWITCHYARD_REQUIRE_WGPU_COOPMAT=1 \
    timeout 20 $W/coopmat-tests --test-threads 1 > tests_$v.txt 2>&1; echo "[$v] tests rc=$? ($(($(date +%s)-START))s)"
  grep -E "test result|panicked|\| fail|pass_times_at_4096:" tests_$v.txt | cut -c1-330 | head -8
done
timeout 25 $W/switchyard bench --backend cuda --filter dense_gemm_bf16_pipelined --iters 10 > bench_cuda.md 2>&1
echo "cuda bench rc=$? ($(($(date +%s)-START))s)"; grep -E "dense_gemm|rror" bench_cuda.md | cut -c1-220
for v in 8w $(echo $VARIANTS | tr ' ' '\n' | grep -v '^8w$'); do
  [ "$(left)" -gt 18 ] || { echo "[$v] bench skipped (time)"; continue; }
  SWITCHYARD_WGSL_COOPMAT_TILE=$v timeout 18 $W/switchyard bench --backend wgpu --filter dense_gemm_bf16_pipelined --iters 10 > bench_wgpu_$v.md 2>&1
  echo "[$v] wgpu bench rc=$? ($(($(date +%s)-START))s)"; grep -E "dense_gemm|rror" bench_wgpu_$v.md | cut -c1-220
done
[ "$(left)" -gt 8 ] && { SWITCHYARD_REQUIRE_WGPU=1 timeout $(left) $W/switchyard parity --backend wgpu --filter dense_gemm > parity_wgpu.txt 2>&1; echo "parity rc=$?"; grep -E "fail|wgpu:" parity_wgpu.txt | tail -4; }
echo "done at $(($(date +%s)-START))s"
