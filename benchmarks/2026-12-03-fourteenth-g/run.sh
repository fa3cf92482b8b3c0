#!/usr/bin/env bash
# Fourteenth session, last call (about 150 s).
#   NEXT4 = 0f657ef: the WGSL routing's staging as named values and its
#           selection rounds through subgroup operations at one row; the
#           segment GEMV's four-chunk round as named values;
#   NEXT3 = 0e8e12e (call f).
# There: carry dist-c6 and .device-vk; bash benchmarks/2026-12-03-fourteenth-g/run.sh
for d in next4 next3; do mkdir -p dist-$d; xz -dc dist-c6/$d.xz > dist-$d/switchyard; chmod +x dist-$d/switchyard; done
S=./dist-next4/switchyard
source benchmarks/device_lib.sh
echo "== parity NEXT4 wgpu (Vulkan): all; moe_ with the route in two dispatches; moe_ with SEG_CHUNKS 1 and 4" >> $X
timeout 100 $S parity --backend wgpu > $OUT/parity_wgpu.txt 2>&1; tail -2 $OUT/parity_wgpu.txt | head -1 >> $X
SWITCHYARD_WGSL_ROUTE_PASSES=2 timeout 60 $S parity --backend wgpu --filter moe_ 2>&1 | tail -2 | head -1 >> $X
for c in 1 4; do SWITCHYARD_WGSL_SEG_CHUNKS=$c timeout 60 $S parity --backend wgpu --filter moe_ 2>&1 | tail -2 | head -1 >> $X; done
fixtures wgpu "tiny-moe tiny-26b-a4b"; t
echo "== 26b-a4b wgpu: NEXT4 / NEXT3 two rounds; NEXT4 with SEG_CHUNKS 4 and 1" >> $X
for round in 1 2; do
  bm "wgpu 26b next4" $S bench-model --backend wgpu --shape 26b-a4b --batch 1,16 --steps 8
  bm "wgpu 26b next3" ./dist-next3/switchyard bench-model --backend wgpu --shape 26b-a4b --batch 1,16 --steps 8
done
for c in 4 1; do bm "wgpu 26b next4 SEG_CHUNKS=$c" env SWITCHYARD_WGSL_SEG_CHUNKS=$c $S bench-model --backend wgpu --shape 26b-a4b --batch 1,16 --steps 8; done; t
SWITCHYARD_WGSL_ROUTE_PASSES=2 timeout 60 $S bench-model --backend wgpu --shape 26b-a4b --batch 1 --steps 4 --profile-timed-steps > $OUT/wgpu_26b_profile_2pass.txt 2>&1
echo "profile NEXT4 (route in two dispatches):" >> $X; grep -E "^\| (moe_|attention|dense|qkv)" $OUT/wgpu_26b_profile_2pass.txt | head -13 >> $X; t
cd $OUT && tar czf raw.tgz parity_wgpu.txt model_err.txt wgpu_26b_profile_2pass.txt 2>/dev/null && rm -f parity_wgpu.txt model_err.txt
