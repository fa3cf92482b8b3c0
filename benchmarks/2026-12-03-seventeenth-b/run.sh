#!/usr/bin/env bash
# Seventeenth session, call b: launch latency of the decode's plain launches.
# OLD = e394321 (+ bench-model --session-tokens); V0 = OLD + the reduce
# reading only a sequence's active chunks (call a's NEW less its last-block
# entries, the first batch of loads before ctx_len); V1 = V0 + qkv_prep as a
# programmatic dependent; V2 = V1 + the decode attention entries too;
# V3 = V2 + the norm entries too.
# There: carry dist-s17 and .device-vk; bash benchmarks/2026-12-03-seventeenth-b/run.sh
mkdir -p dist-new; for b in old v0 v1 v2 v3; do xz -dc dist-s17/switchyard-$b.xz > dist-new/switchyard-$b; done; chmod +x dist-new/*
S=./dist-new/switchyard-v3
source benchmarks/device_lib.sh
echo "== parity (V3, cuda): attention, qkv_prep, norm, gemv, moe" >> $X
for f in attention qkv_prep norm gemv moe; do
  timeout 100 $S parity --backend cuda --filter $f > $OUT/parity_$f.txt 2>&1; tail -2 $OUT/parity_$f.txt | head -1 | sed "s/^/$f: /" >> $X
done
grep -hE "\| fail|FAIL" $OUT/parity_*.txt | head -5 >> $X; t
echo "== untimed runs that fill the cubin cache" >> $X
for v in old v0 v1 v2 v3; do timeout 150 ./dist-new/switchyard-$v bench-model --backend cuda --batch 1 --steps 2 > /dev/null 2>&1; done; t
timeout 150 $S bench-model --backend cuda --shape 26b-a4b --batch 1 --steps 2 > /dev/null 2>&1; t
echo "== bench-model, alternating" >> $X
for round in 1 2 3; do
  for v in old v0 v1 v2 v3; do
    bm "$v default" ./dist-new/switchyard-$v bench-model --backend cuda --batch 1,16 --steps 48
  done
  for v in old v0 v1 v2 v3; do
    bm "$v 26b" ./dist-new/switchyard-$v bench-model --backend cuda --shape 26b-a4b --batch 1,16 --steps 48
  done
  t
done
for round in 1 2; do
  for v in old v0 v3; do
    bm "$v default s8192" ./dist-new/switchyard-$v bench-model --backend cuda --batch 1 --steps 48 --session-tokens 8192
  done
done; t
cat $X
