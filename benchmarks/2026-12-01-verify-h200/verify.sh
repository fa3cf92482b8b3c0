#!/usr/bin/env bash
# Lead's verification of the session's last build: parity on both backends, the sm_90a GEMM / MoE tests
# (the shared consumer loop, the 224-column tile), gemm_bench against cuBLAS, then decode on both backends.
set -u
source .device-vk/env.sh
export SWITCHYARD_REQUIRE_CUDA=1
X=$OUT/verify.txt
T0=$SECONDS
r() { echo "== $* ($((SECONDS - T0)) s)" >> $X; timeout "$@" >> $X 2>&1; echo "rc=$?" >> $X; }
r 60 ./dist/switchyard parity --backend cuda
r 30 ./dist/switchyard parity --backend wgpu
r 40 ./dist/gemm_test --test-threads 1 pipelined
r 40 ./dist/moe_test --test-threads 1
r 80 ./dist/gemm_bench
r 20 ./dist/switchyard bench-model --backend cuda --batch 1 --steps 32
r 25 ./dist/switchyard bench-model --backend wgpu --batch 1 --steps 16
echo "== end ($((SECONDS - T0)) s)" >> $X
grep -E "^== |^rc=|passed|test result|^\| 1 \||pipelined|cuBLAS" $X | head -80
