#!/bin/bash
# Issue 14 item 5 on the H200: cooperative-matrix configs, coopmat parity, wgpu vs cuda dense GEMM bench.
set -u
source .device-vk/env.sh
D=/tmp/coop-bin
mkdir -p $D && for f in switchyard coopmat-tests; do xz -dc dist-coop/$f.xz > $D/$f && chmod +x $D/$f; done
cd "$OUT"
timeout 20 $D/switchyard info --backend wgpu > info.txt 2>&1; echo "info rc=$?"
grep -E "^(device|driver)|cooperative|subgroups" info.txt
SWITCHYARD_REQUIRE_WGPU=1 SWITCHYARD_REQUIRE_WGPU_COOPMAT=1 timeout 30 $D/coopmat-tests --test-threads 1 > tests.txt 2>&1; echo "tests rc=$?"
grep -E "^test |test result|panicked|\| fail|coopmat_gemm" tests.txt | cut -c1-300 | head -40
timeout 35 $D/switchyard bench --backend wgpu --filter dense_gemm_bf16_pipelined --iters 10 > bench_wgpu.md 2>&1; echo "wgpu bench rc=$?"
grep -E "dense_gemm|error|Error" bench_wgpu.md | cut -c1-260
timeout 30 $D/switchyard bench --backend cuda --filter dense_gemm_bf16_pipelined --iters 10 > bench_cuda.md 2>&1; echo "cuda bench rc=$?"
grep -E "dense_gemm|error|Error" bench_cuda.md | cut -c1-260
