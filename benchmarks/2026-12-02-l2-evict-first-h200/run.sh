#!/usr/bin/env bash
# Streaming loads (ld_stream16, ld_stream16_v: weights, once-read activations)
# with an L2 evict_first cache policy, so the KV cache, activations and kernel
# code survive a decode step's weight streams in L2. A = d268287, B = A + evict.patch.
set -u
D=${D:-dist-attn}
A=$D/switchyard-A B=$D/switchyard-B
export SWITCHYARD_REQUIRE_CUDA=1
echo "== parity (B, every case)"; timeout 120 $B parity --backend cuda > $OUT/parity_B.txt 2>&1; grep -E "passed|FAIL" $OUT/parity_B.txt | tail -3
for r in 1 2; do
  for v in A B; do
    bin=$A; [ $v = B ] && bin=$B
    $bin bench-model --backend cuda --batch 1,16 --steps 32 > $OUT/bm_${v}_$r.txt 2>&1
    echo "bench-model $v round $r: $(grep -E '^\| *(1|16) *\|' $OUT/bm_${v}_$r.txt | awk -F'|' '{printf "b%s %s tok/s (%s); ", $2, $3, $9}')"
  done
done
$B bench-model --backend cuda --shape 26b-a4b --batch 1 --steps 32 > $OUT/bm_B_moe.txt 2>&1
$A bench-model --backend cuda --shape 26b-a4b --batch 1 --steps 32 > $OUT/bm_A_moe.txt 2>&1
for v in A B; do echo "26b-a4b $v: $(grep -E '^\| *1 *\|' $OUT/bm_${v}_moe.txt | awk -F'|' '{printf "%s tok/s (%s)", $3, $9}')"; done
for v in A B; do
  bin=$A; [ $v = B ] && bin=$B
  timeout 60 $bin bench --backend cuda --iters 10 --filter dense_gemv > $OUT/bench_$v.txt 2>&1
  timeout 40 $bin bench --backend cuda --iters 10 --filter lm_head >> $OUT/bench_$v.txt 2>&1
  echo "kernel rows $v:"; grep -E "^\| (dense_gemv|lm_head)" $OUT/bench_$v.txt | awk -F'|' '{print "  ", $2, $3, $6, $10}'
done
cd $OUT && tar czf raw.tgz bm_*.txt bench_*.txt parity_B.txt && rm -f bm_*.txt bench_*.txt parity_B.txt
