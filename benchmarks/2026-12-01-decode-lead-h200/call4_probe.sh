#!/bin/bash
# Lead probe 4: m >= 2 GEMV, wave-filling K split (D) against 4 blocks/SM (A).
cd dist-lead && for v in A D; do xz -d -c sy-$v.xz > sy-$v && chmod +x sy-$v; done; cd ..
{
dist-lead/sy-D parity --backend cuda --filter dense_gemv 2>&1 | tail -1
for round in 1 2 3; do
  for v in A D; do
    echo "$v b16"; timeout 60 dist-lead/sy-$v bench-model --backend cuda --batch 16 --steps 16 2>&1 | grep "^| [0-9]"
  done
done
for v in A D; do
  echo "== $v kernel rows"; timeout 60 dist-lead/sy-$v bench --backend cuda --iters 20 --filter dense_gemv 2>&1 | grep "m=16\|copy ceiling"
done
} > $OUT/probe4.txt 2>&1
