#!/usr/bin/env bash
# Decode attention as a programmatic dependent (the chunk's first KV rows
# asked of L2 before the wait) and the cluster combine's loads batched:
# A = the build before (61270cf), B = after; same call.
set -u
D=${D:-dist-attn}
A=$D/switchyard-before B=$D/switchyard
export SWITCHYARD_REQUIRE_CUDA=1
echo "== parity (B)"; $B parity --backend cuda --filter attention 2>&1 | tail -2
echo "== parity (A)"; $A parity --backend cuda --filter attention 2>&1 | tail -1
for tool in memcheck racecheck; do
  echo "== $tool (B)"; timeout 150 compute-sanitizer --tool $tool $B parity --backend cuda --filter attention_decode > $OUT/san_$tool.txt 2>&1; tail -3 $OUT/san_$tool.txt
done
for r in 1 2; do
  for v in A B; do
    bin=$A; [ $v = B ] && bin=$B
    $bin bench-model --backend cuda --batch 1,16 --steps 32 > $OUT/bm_${v}_$r.txt 2>&1
    echo "bench-model $v round $r: $(grep -E '^\| *(1|16) *\|' $OUT/bm_${v}_$r.txt | awk -F'|' '{printf "b%s %s tok/s (%s); ", $2, $3, $9}')"
  done
done
for v in A B; do
  bin=$A; [ $v = B ] && bin=$B
  $bin bench --backend cuda --iters 10 --filter attention_decode > $OUT/bench_$v.txt 2>&1
done
cd $OUT && tar czf raw.tgz bm_*.txt && rm -f bm_*.txt
