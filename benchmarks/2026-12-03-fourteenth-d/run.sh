#!/usr/bin/env bash
# Fourteenth session, fourth call (about 120 s): the WGSL MoE row kernels.
#   NEW = 120dd64: moe_combine(_post_norms)_bf16 with the slots staged and a
#         word's expert loads issued eight at a time; moe_route_decode with the
#         products formed by the workgroup, the selection's serial walks split.
#   PREV = 90cd6dc.
# There: carry dist-c3 and .device-vk; bash benchmarks/2026-12-03-fourteenth-d/run.sh
for d in next prev; do mkdir -p dist-$d; xz -dc dist-c3/$d.xz > dist-$d/switchyard; chmod +x dist-$d/switchyard; done
source benchmarks/device_lib.sh
P=./dist-prev/switchyard
echo "== parity NEW: wgpu and cuda --filter moe_ (and the route's two-dispatch form on wgpu)" >> $X
timeout 60 $S parity --backend wgpu --filter moe_ 2>&1 | tail -2 | head -1 >> $X
SWITCHYARD_WGSL_ROUTE_PASSES=2 timeout 60 $S parity --backend wgpu --filter moe_route 2>&1 | tail -2 | head -1 >> $X
timeout 60 $S parity --backend cuda --filter moe_ 2>&1 | tail -2 | head -1 >> $X
fixtures wgpu "tiny-moe tiny-26b-a4b"; t
echo "== 26b-a4b wgpu batch 1 (and 16): NEW / PREV, two rounds; cuda NEW once" >> $X
for round in 1 2; do
  bm "wgpu NEW" $S bench-model --backend wgpu --shape 26b-a4b --batch 1,16 --steps 8
  bm "wgpu PREV" $P bench-model --backend wgpu --shape 26b-a4b --batch 1,16 --steps 8
done
bm "cuda NEW" $S bench-model --backend cuda --shape 26b-a4b --batch 1 --steps 32; t
for b in S P; do
  timeout 60 ${!b} bench-model --backend wgpu --shape 26b-a4b --batch 1 --steps 4 --profile-timed-steps > $OUT/wgpu_26b_profile_$b.txt 2>&1
  echo "profile $b:" >> $X; grep -E "^\| (moe_|attention|dense|qkv)" $OUT/wgpu_26b_profile_$b.txt | head -12 >> $X
done; t
