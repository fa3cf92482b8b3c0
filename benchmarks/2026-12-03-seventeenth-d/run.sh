#!/usr/bin/env bash
# Seventeenth session, call d: the final build (734f558: the reduce reads
# only a sequence's active chunks, bench-model --session-tokens) against
# OLD (e394321 + --session-tokens). Correctness, then decode in default
# sessions and in 8192-token sessions.
# There: carry dist-s17 and .device-vk; bash benchmarks/2026-12-03-seventeenth-d/run.sh
mkdir -p dist-new; for b in final old; do xz -dc dist-s17/switchyard-$b.xz > dist-new/switchyard-$b; done; chmod +x dist-new/*
S=./dist-new/switchyard-final
O=./dist-new/switchyard-old
source benchmarks/device_lib.sh
echo "== parity, cuda and wgpu (Vulkan)" >> $X
for be in cuda wgpu; do timeout 170 $S parity --backend $be > $OUT/parity_$be.txt 2>&1; tail -2 $OUT/parity_$be.txt | head -1 >> $X; done
grep -hE "\| fail" $OUT/parity_*.txt | head -5 >> $X; t
echo "== sanitizers over attention_decode" >> $X
for tool in memcheck racecheck; do san $tool attention_decode; done
grep -hE "ERROR SUMMARY|RACECHECK SUMMARY|rc=" $OUT/san_*.txt >> $X; t
echo "== HF fixtures, cuda and wgpu" >> $X
fixtures; t
echo "== bench-model, alternating" >> $X
timeout 150 $O bench-model --backend cuda --batch 1 --steps 2 > /dev/null 2>&1; t
for round in 1 2; do
  for v in old final; do
    bm "$v default" ./dist-new/switchyard-$v bench-model --backend cuda --batch 1,16 --steps 48
    bm "$v default s8192" ./dist-new/switchyard-$v bench-model --backend cuda --batch 1,16 --steps 48 --session-tokens 8192
    bm "$v 26b" ./dist-new/switchyard-$v bench-model --backend cuda --shape 26b-a4b --batch 1,16 --steps 32
    bm "$v 26b s8192" ./dist-new/switchyard-$v bench-model --backend cuda --shape 26b-a4b --batch 1 --steps 32 --session-tokens 8192
  done
  t
done
bm "final wgpu default" $S bench-model --backend wgpu --batch 1 --steps 16; t
cat $X
