#!/usr/bin/env bash
# Lead's verification call: the layer-output fusion (dense_gemv_layer_out_rmsnorm_bf16) on the H200,
# correctness (cuda parity, the new kernel on wgpu, memcheck, HF fixtures) and A/B against build 87e7af1 (D).
set -u
S=dist/switchyard
xz -d -c dist/sy-D.xz > dist/sy-D && chmod +x dist/sy-D
B=dist/sy-D
source .device-vk/env.sh
export SWITCHYARD_REQUIRE_CUDA=1
V=$OUT/verify.txt
{
echo "== parity cuda"; timeout 90 $S parity --backend cuda 2>&1 | tail -1
echo "== parity wgpu (layer_out, dense_gemv)"; timeout 60 $S parity --backend wgpu --filter layer_out 2>&1 | tail -1
echo "== memcheck"; timeout 60 compute-sanitizer --tool memcheck $S parity --backend cuda --filter layer_out 2>&1 | grep -E "ERROR SUMMARY|passed"
echo "== racecheck"; timeout 60 compute-sanitizer --tool racecheck $S parity --backend cuda --filter dense_gemv_layer_out 2>&1 | grep -E "RACECHECK SUMMARY|passed"
for be in cuda wgpu; do
  for fx in tiny-dense tiny-moe tiny-e2b tiny-e4b tiny-26b-a4b tiny-31b; do
    timeout 30 $S generate --model tests/fixtures/$fx --backend $be --prompt-ids 2,17,99,5,250,31 \
        --max-new-tokens 10 --ignore-eos --json > /tmp/$fx.$be.json 2>/dev/null
    python3 scripts/compare_fixture.py tests/fixtures/$fx/expected.json /tmp/$fx.$be.json "$fx on $be vs HF" | tail -1
  done
done
for r in 1 2 3; do
  echo "== D b1"; timeout 30 $B bench-model --backend cuda --batch 1 --steps 32 2>&1 | grep "^| [0-9]"
  echo "== new b1"; timeout 30 $S bench-model --backend cuda --batch 1 --steps 32 2>&1 | grep "^| [0-9]"
done
echo "== D b16"; timeout 30 $B bench-model --backend cuda --batch 16 --steps 16 2>&1 | grep "^| [0-9]"
echo "== new b16"; timeout 30 $S bench-model --backend cuda --batch 16 --steps 16 2>&1 | grep "^| [0-9]"
echo "== D 26b-a4b b1"; timeout 40 $B bench-model --backend cuda --shape 26b-a4b --batch 1 --steps 32 2>&1 | grep "^| [0-9]"
echo "== new 26b-a4b b1"; timeout 40 $S bench-model --backend cuda --shape 26b-a4b --batch 1 --steps 32 2>&1 | grep "^| [0-9]"
echo "== new wgpu b1"; timeout 40 $S bench-model --backend wgpu --batch 1 --steps 16 2>&1 | grep "^| [0-9]"
echo "== done at $SECONDS s"
} > $V 2>&1
cat $V
