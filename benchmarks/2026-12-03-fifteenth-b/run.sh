#!/usr/bin/env bash
# Fifteenth session, call b. NEXT = e016a50 (call a's NEW plus the WGSL
# decode attention's q, K/V tile and combine loads as named values);
# NEW = 61bb5fc (call a's build). Parity and fixtures of NEXT on wgpu, then
# NEXT / NEW alternating on wgpu decode, NEXT's per-dispatch profile, and
# the cuda rows of the same build for the README table.
# There: carry dist-c2 and .device-vk; bash benchmarks/2026-12-03-fifteenth-b/run.sh
for d in next new; do mkdir -p dist-$d; xz -dc dist-c2/$d.xz > dist-$d/switchyard; chmod +x dist-$d/switchyard; done
S=./dist-next/switchyard
source benchmarks/device_lib.sh
echo "== parity NEXT, wgpu (Vulkan) and cuda" >> $X
for be in wgpu cuda; do timeout 100 $S parity --backend $be > $OUT/parity_$be.txt 2>&1; tail -2 $OUT/parity_$be.txt | head -1 >> $X; done
SWITCHYARD_WGPU_SUBGROUPS=0 timeout 30 $S parity --backend wgpu --filter attention 2>&1 | tail -2 | head -1 | sed "s/^/SUBGROUPS=0 attention /" >> $X
grep -hE "\| fail" $OUT/parity_*.txt | head -5 >> $X; t
echo "== HF fixtures NEXT, wgpu" >> $X
fixtures wgpu; t
echo "== wgpu decode: NEXT / NEW, two rounds" >> $X
for round in 1 2; do
  for b in next new; do
    bm "wgpu default $b" ./dist-$b/switchyard bench-model --backend wgpu --batch 1,16 --steps 16
    bm "wgpu 26b $b" ./dist-$b/switchyard bench-model --backend wgpu --shape 26b-a4b --batch 1,16 --steps 8
  done
done; t
echo "== cuda rows NEXT" >> $X
bm "cuda default" $S bench-model --backend cuda --batch 1,16 --steps 32
bm "cuda 26b" $S bench-model --backend cuda --shape 26b-a4b --batch 1,16 --steps 32; t
for sh in default 26b-a4b; do
  timeout 60 $S bench-model --backend wgpu --shape $sh --batch 1 --steps 4 --profile-timed-steps > $OUT/wgpu_profile_$sh.txt 2>&1
  echo "profile wgpu $sh NEXT:" >> $X; grep -E "^\| (moe_|attention|dense|qkv|lm_head|argmax)" $OUT/wgpu_profile_$sh.txt | head -12 >> $X
done; t
cd $OUT && tar czf raw.tgz parity_*.txt model_err.txt wgpu_profile_*.txt 2>/dev/null && rm -f parity_*.txt model_err.txt
