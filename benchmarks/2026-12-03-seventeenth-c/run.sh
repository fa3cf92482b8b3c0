#!/usr/bin/env bash
# Seventeenth session, call c: the CUDA decode attention's split at batch 16.
# BASE = 734f558; S = BASE + one-team stages fitted to the chunk's tiles
# (min(6, max(2, tiles))); T = S + DECODE_TARGET_BLOCKS 1024 (batch 16 at 4
# KV heads and ~200 keys: 13 chunks of one tile instead of 4 of four);
# T512 = S + DECODE_TARGET_BLOCKS 512.
# There: carry dist-s17 and .device-vk; bash benchmarks/2026-12-03-seventeenth-c/run.sh
mkdir -p dist-new; for b in base S T T512; do xz -dc dist-s17/switchyard-$b.xz > dist-new/switchyard-$b; done; chmod +x dist-new/*
S=./dist-new/switchyard-T
source benchmarks/device_lib.sh
echo "== parity attention_decode (cuda): S, T, T512" >> $X
for v in S T T512; do
  timeout 100 ./dist-new/switchyard-$v parity --backend cuda --filter attention_decode > $OUT/parity_$v.txt 2>&1; tail -2 $OUT/parity_$v.txt | head -1 | sed "s/^/$v: /" >> $X
done
grep -hE "\| fail|FAIL" $OUT/parity_*.txt | head -5 >> $X; t
echo "== untimed runs that fill the cubin cache" >> $X
for v in base S T T512; do timeout 150 ./dist-new/switchyard-$v bench-model --backend cuda --batch 1 --steps 2 > /dev/null 2>&1; done; t
echo "== kernel rows: bench --filter attention_decode" >> $X
for v in base S T T512; do
  timeout 60 ./dist-new/switchyard-$v bench --backend cuda --iters 10 --filter attention_decode 2>&1 | grep -E "^\| attention_decode" | cut -d'|' -f3,4,11 | sed "s/^/$v /" >> $X
done; t
echo "== bench-model, alternating" >> $X
for round in 1 2 3; do
  for v in base S T T512; do
    bm "$v default" ./dist-new/switchyard-$v bench-model --backend cuda --batch 1,16 --steps 48
  done
  for v in base S T T512; do
    bm "$v 26b" ./dist-new/switchyard-$v bench-model --backend cuda --shape 26b-a4b --batch 16 --steps 24
  done
  t
done
cat $X
