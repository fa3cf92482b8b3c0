#!/usr/bin/env bash
# Fourteenth session, fifth call (about 150 s): the WGSL MoE row kernels again.
#   NEXT2 = the combine's loads unconditional, the segment GEMVs four chunks a round;
#   NEXT  = 120dd64 (call d's NEW); PREV = 90cd6dc.
# Also NEXT2 with the layer-output and sandwich row passes (one workgroup
# forms the row, then the plain m = 1 GEMV) instead of every workgroup forming it.
# There: carry dist-c4 and .device-vk; bash benchmarks/2026-12-03-fourteenth-e/run.sh
for d in next2 next prev; do mkdir -p dist-$d; xz -dc dist-c4/$d.xz > dist-$d/switchyard; chmod +x dist-$d/switchyard; done
S=./dist-next2/switchyard
source benchmarks/device_lib.sh
echo "== parity NEXT2: wgpu --filter moe_ (both route forms), cuda --filter moe_" >> $X
timeout 60 $S parity --backend wgpu --filter moe_ 2>&1 | tail -2 | head -1 >> $X
SWITCHYARD_WGSL_ROUTE_PASSES=2 timeout 60 $S parity --backend wgpu --filter moe_route 2>&1 | tail -2 | head -1 >> $X
timeout 60 $S parity --backend cuda --filter moe_ 2>&1 | tail -2 | head -1 >> $X
fixtures wgpu "tiny-moe tiny-26b-a4b"; t
echo "== 26b-a4b wgpu batch 1 and 16: NEXT2 / NEXT / PREV / NEXT2 row passes, two rounds" >> $X
for round in 1 2; do
  bm "wgpu NEXT2" $S bench-model --backend wgpu --shape 26b-a4b --batch 1,16 --steps 8
  bm "wgpu NEXT" ./dist-next/switchyard bench-model --backend wgpu --shape 26b-a4b --batch 1,16 --steps 8
  bm "wgpu PREV" ./dist-prev/switchyard bench-model --backend wgpu --shape 26b-a4b --batch 1,16 --steps 8
  bm "wgpu NEXT2 rowpass" env SWITCHYARD_WGSL_LAYER_OUT_ROW_PASS=1 SWITCHYARD_WGSL_SANDWICH_ROW_PASS=1 $S bench-model --backend wgpu --shape 26b-a4b --batch 1 --steps 8
done; t
timeout 60 $S bench-model --backend wgpu --shape 26b-a4b --batch 1 --steps 4 --profile-timed-steps > $OUT/wgpu_26b_profile.txt 2>&1
grep -E "^\| (moe_|attention|dense|qkv)" $OUT/wgpu_26b_profile.txt | head -12 >> $X; t
