#!/usr/bin/env bash
# Lead's final call: the all-in-one checks and default-shape decode (h200_checks.sh),
# then extras into one file: the gemv variant binary's wgpu decode, the wgpu coopmat GEMM
# without loop bounding beside cuda, cuda 26b-a4b decode.
set -u
export OUT=${OUT:-/tmp/h200}
mkdir -p "$OUT"
START=$SECONDS
PARTS="checks decode" SANITIZERS="memcheck racecheck" SHAPES=default HF_MODES=compile DEADLINE=${DEADLINE:-330} \
    bash scripts/h200_checks.sh
X=$OUT/extras.txt
source .device-vk/env.sh
export SWITCHYARD_REQUIRE_CUDA=1
echo "== extras start at $((SECONDS - START)) s" >> $X
echo "== v2 (gemv: norm prologue under the first loads, gated m1, m1 up to K 16384): wgpu bench-model b1" >> $X
timeout 60 ./dist/switchyard-v2 bench-model --backend wgpu --batch 1 --steps 16 --profile-timed-steps >> $X 2>&1
echo "== base: wgpu bench-model b1 again (order effects)" >> $X
timeout 45 ./dist/switchyard bench-model --backend wgpu --batch 1 --steps 16 >> $X 2>&1
echo "== cuda bench-model b1 again" >> $X
timeout 30 ./dist/switchyard bench-model --backend cuda --batch 1 --steps 32 >> $X 2>&1
echo "== v2 parity wgpu" >> $X
timeout 60 ./dist/switchyard-v2 parity --backend wgpu 2>&1 | tail -3 >> $X
echo "== cuda 26b-a4b b1" >> $X
timeout 45 ./dist/switchyard bench-model --backend cuda --shape 26b-a4b --batch 1 --steps 32 >> $X 2>&1
echo "== coopmat dense GEMM (loop bounding off) wgpu vs cuda" >> $X
timeout 45 ./dist/switchyard bench --backend wgpu --iters 5 --filter dense_gemm_bf16_pipelined >> $X 2>&1
timeout 30 ./dist/switchyard bench --backend cuda --iters 5 --filter dense_gemm_bf16_pipelined >> $X 2>&1
echo "== done at $((SECONDS - START)) s" >> $X
grep -E "^\| 1 \||^== |passed|pipelined|^\| entry|^\| dense_gemv|^\| attention|^GPU time|^batch 1" $X | head -60
tail -45 $OUT/summary.txt
