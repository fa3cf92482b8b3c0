#!/bin/bash
# Issue 14 item 5, second call: two variants of the f16 copy-staged coopmat GEMM
# (a: one stage, two barriers a K tile; b: two stages, one barrier), parity + wgpu bench each, cuda bench once.
set -u
source .device-vk/env.sh
D=/tmp/coop-bin; mkdir -p $D
for f in sy-a sy-b tests-a tests-b; do xz -dc dist-coop/$f.xz > $D/$f && chmod +x $D/$f; done
cd "$OUT"
timeout 10 $D/sy-b info --backend wgpu 2>&1 | grep -E "cooperative_matrix:"
for v in a b; do
  SWITCHYARD_REQUIRE_WGPU=1 SWITCHYARD_REQUIRE_WGPU_COOPMAT=1 timeout 20 $D/tests-$v --test-threads 1 > tests-$v.txt 2>&1; echo "[$v] tests rc=$?"
  grep -E "test result|panicked|\| fail" tests-$v.txt | cut -c1-250 | head -12
  timeout 25 $D/sy-$v bench --backend wgpu --filter dense_gemm_bf16_pipelined --iters 10 > bench_wgpu_$v.md 2>&1; echo "[$v] wgpu bench rc=$?"
  grep -E "dense_gemm|rror" bench_wgpu_$v.md | cut -c1-200
done
timeout 20 $D/sy-a bench --backend cuda --filter dense_gemm_bf16_pipelined --iters 10 > bench_cuda.md 2>&1; echo "cuda bench rc=$?"
grep -E "dense_gemm|rror" bench_cuda.md | cut -c1-200
