#!/usr/bin/env bash
# Seventeenth session, call a: the decode attention's combine.
# NEW = the two-pass reduce reads only a sequence's active chunks (idle
# blocks write nothing), and SWITCHYARD_ATTN_DECODE_LAST=1 runs both passes
# in one launch (the last block of each group combines); OLD = e394321 with
# bench-model's new --session-tokens flag only.
# There: carry dist-s17 and .device-vk; bash benchmarks/2026-12-03-seventeenth-a/run.sh
mkdir -p dist-new; for b in new old; do xz -dc dist-s17/switchyard-$b.xz > dist-new/switchyard-$b; done; chmod +x dist-new/*
S=./dist-new/switchyard-new
O=./dist-new/switchyard-old
source benchmarks/device_lib.sh
echo "== parity attention (cuda): default; attention_decode with LAST=1, and LAST=1 + TEAMS=2" >> $X
timeout 120 $S parity --backend cuda --filter attention > $OUT/parity_attn.txt 2>&1; tail -2 $OUT/parity_attn.txt | head -1 >> $X
SWITCHYARD_ATTN_DECODE_LAST=1 timeout 60 $S parity --backend cuda --filter attention_decode > $OUT/parity_last.txt 2>&1; tail -2 $OUT/parity_last.txt | head -1 >> $X
SWITCHYARD_ATTN_DECODE_LAST=1 SWITCHYARD_ATTN_DECODE_TEAMS=2 timeout 60 $S parity --backend cuda --filter attention_decode > $OUT/parity_last_tm.txt 2>&1; tail -2 $OUT/parity_last_tm.txt | head -1 >> $X
grep -hE "\| fail|FAIL" $OUT/parity_*.txt | head -5 >> $X; t
echo "== kernel rows: bench --filter attention_decode (old, new, new LAST=1)" >> $X
timeout 60 $O bench --backend cuda --iters 10 --filter attention_decode 2>&1 | grep -E "attention_decode|copy" | sed "s/^/old /" >> $X
timeout 60 $S bench --backend cuda --iters 10 --filter attention_decode 2>&1 | grep -E "attention_decode|copy" | sed "s/^/new /" >> $X
SWITCHYARD_ATTN_DECODE_LAST=1 timeout 60 $S bench --backend cuda --iters 10 --filter attention_decode 2>&1 | grep -E "attention_decode|copy" | sed "s/^/last /" >> $X; t
echo "== bench-model default shape, alternating (after an untimed run of each binary that fills the cubin cache)" >> $X
timeout 200 $O bench-model --backend cuda --batch 1 --steps 2 > /dev/null 2>&1; timeout 100 $S bench-model --backend cuda --batch 1 --steps 2 > /dev/null 2>&1; t
for round in 1 2; do
  bm "old default" $O bench-model --backend cuda --batch 1,16 --steps 32
  bm "new default" $S bench-model --backend cuda --batch 1,16 --steps 32
  SWITCHYARD_ATTN_DECODE_LAST=1 bm "last default" $S bench-model --backend cuda --batch 1,16 --steps 32
  bm "old default s8192" $O bench-model --backend cuda --batch 1,16 --steps 32 --session-tokens 8192
  bm "new default s8192" $S bench-model --backend cuda --batch 1,16 --steps 32 --session-tokens 8192
  SWITCHYARD_ATTN_DECODE_LAST=1 bm "last default s8192" $S bench-model --backend cuda --batch 1,16 --steps 32 --session-tokens 8192
  t
done
SWITCHYARD_ATTN_DECODE_CLUSTER=1 bm "new default cluster=1" $S bench-model --backend cuda --batch 16 --steps 32; t
cat $X
