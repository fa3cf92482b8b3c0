#!/usr/bin/env bash
# Fourteenth session, final call (about 240 s).
#   NEXT3 = 0e8e12e (the session's HEAD code): the WGSL combine's loads as eight
#           named values, the routing and expert gate/up of calls d and e;
#   MID   = a1fe360 (the combine as before the session, routing and gate/up new);
#   PREV  = 90cd6dc (the session's start with 91bce77 reverted).
# Correctness of NEXT3 on both backends, wgpu 26b-a4b NEXT3 / MID / PREV
# alternating, the decode rows for README, and wgpu 26b-a4b's profile with
# the routing in two dispatches.
# There: carry dist-c5 and .device-vk; bash benchmarks/2026-12-03-fourteenth-f/run.sh
for d in next3 mid prev; do mkdir -p dist-$d; xz -dc dist-c5/$d.xz > dist-$d/switchyard; chmod +x dist-$d/switchyard; done
S=./dist-next3/switchyard
source benchmarks/device_lib.sh
echo "== parity NEXT3, cuda and wgpu (Vulkan)" >> $X
for be in cuda wgpu; do timeout 100 $S parity --backend $be > $OUT/parity_$be.txt 2>&1; tail -2 $OUT/parity_$be.txt | head -1 >> $X; done
grep -hE "\| fail" $OUT/parity_*.txt | head -5 >> $X; t
echo "== HF fixtures NEXT3" >> $X
fixtures; t
echo "== 26b-a4b wgpu: NEXT3 / MID / PREV, two rounds" >> $X
for round in 1 2; do
  for b in next3 mid prev; do bm "wgpu 26b $b" ./dist-$b/switchyard bench-model --backend wgpu --shape 26b-a4b --batch 1,16 --steps 8; done
done; t
echo "== decode rows NEXT3" >> $X
bm "cuda default" $S bench-model --backend cuda --batch 1,16 --steps 32
bm "wgpu default" $S bench-model --backend wgpu --batch 1,16 --steps 16
bm "cuda 26b" $S bench-model --backend cuda --shape 26b-a4b --batch 1,16 --steps 32; t
SWITCHYARD_WGSL_ROUTE_PASSES=2 timeout 60 $S bench-model --backend wgpu --shape 26b-a4b --batch 1 --steps 4 --profile-timed-steps > $OUT/wgpu_26b_profile_2pass.txt 2>&1
timeout 60 $S bench-model --backend wgpu --shape 26b-a4b --batch 1 --steps 4 --profile-timed-steps > $OUT/wgpu_26b_profile.txt 2>&1
echo "profile (route in two dispatches):" >> $X; grep -E "^\| (moe_|attention|dense|qkv)" $OUT/wgpu_26b_profile_2pass.txt | head -13 >> $X
echo "profile:" >> $X; grep -E "^\| (moe_|attention|dense|qkv)" $OUT/wgpu_26b_profile.txt | head -12 >> $X; t
cd $OUT && tar czf raw.tgz parity_*.txt model_err.txt wgpu_26b_profile*.txt 2>/dev/null && rm -f parity_*.txt model_err.txt
