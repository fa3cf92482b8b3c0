#!/usr/bin/env bash
# Fourteenth session, third call (about 250 s). Builds (dist-c2/*.xz):
#   base: 90cd6dc (91bce77 reverted);
#   v1:   + the fused-norm GEMVs' prologue rows staged in shared memory with
#           cp.async (weights before the wait, x and mid after it: one round
#           trip instead of three);
#   v2:   v1 + the slice's later weight batches prefetched into L2 before the wait;
#   v3:   v2 + the routing kernel's products formed by the whole block and the
#           chain's loads 8 vectors ahead of its adds.
# There: carry dist-c2 and .device-vk; bash benchmarks/2026-12-03-fourteenth-c/run.sh
for d in base v1 v2 v3; do mkdir -p dist-$d; xz -dc dist-c2/$d.xz > dist-$d/switchyard; chmod +x dist-$d/switchyard; done
S=./dist-v3/switchyard
source benchmarks/device_lib.sh

echo "== parity cuda (v3)" >> $X
timeout 90 $S parity --backend cuda > $OUT/parity_cuda.txt 2>&1; tail -1 $OUT/parity_cuda.txt >> $X
grep -E "FAIL|fail" $OUT/parity_cuda.txt | head -5 >> $X; t
for tool in memcheck racecheck; do
  for f in dense_gemv_rmsnorm dense_gemv_layer_out dense_gemv_sandwich moe_route_decode; do san $tool $f; done
  san $tool moe_route_decode SWITCHYARD_CUDA_ROUTE_DECODE=staged
  grep -E "^cuda: |SUMMARY|^rc=" $OUT/san_$tool.txt | sed "s/^/$tool: /" >> $X
done; t
echo "== HF fixtures on cuda (v3)" >> $X
fixtures cuda; t
echo "== bench-model cuda: base / v1 / v2 / v3, two rounds (warm-ups first)" >> $X
for b in base v1 v2 v3; do
  for shape in default 26b-a4b; do timeout 100 ./dist-$b/switchyard bench-model --backend cuda --shape $shape --batch 1 --steps 4 > /dev/null 2>&1; done
done; t
for round in 1 2; do
  for b in base v1 v2 v3; do
    bm "default $b" ./dist-$b/switchyard bench-model --backend cuda --batch 1,16 --steps 32
    bm "26b $b" ./dist-$b/switchyard bench-model --backend cuda --shape 26b-a4b --batch 1 --steps 32
  done
done; t
cd $OUT && tar czf raw.tgz parity_cuda.txt san_*.txt model_err.txt 2>/dev/null && rm -f parity_cuda.txt san_*.txt model_err.txt
