#!/usr/bin/env bash
# Seventeenth session, call e: the WGSL decode attention's combine reading
# only a sequence's active chunks, idle chunks' workgroups arriving without
# work (WG) against the previous build (FINAL = 37f622f), on wgpu (Vulkan).
# There: carry dist-s17 and .device-vk; bash benchmarks/2026-12-03-seventeenth-e/run.sh
mkdir -p dist-new; for b in wg final; do xz -dc dist-s17/switchyard-$b.xz > dist-new/switchyard-$b; done; chmod +x dist-new/*
S=./dist-new/switchyard-wg
source benchmarks/device_lib.sh
echo "== parity attention (wgpu, Vulkan)" >> $X
timeout 120 $S parity --backend wgpu --filter attention > $OUT/parity_attn.txt 2>&1; tail -2 $OUT/parity_attn.txt | head -1 >> $X
grep -hE "\| fail|FAIL" $OUT/parity_*.txt | head -5 >> $X; t
echo "== wgpu bench-model, alternating" >> $X
for round in 1 2; do
  for v in final wg; do
    bm "$v wgpu default" ./dist-new/switchyard-$v bench-model --backend wgpu --batch 1 --steps 16
    bm "$v wgpu default s8192" ./dist-new/switchyard-$v bench-model --backend wgpu --batch 1,16 --steps 16 --session-tokens 8192
    bm "$v wgpu 26b s8192" ./dist-new/switchyard-$v bench-model --backend wgpu --shape 26b-a4b --batch 1 --steps 16 --session-tokens 8192
  done
  t
done
cat $X
