#!/bin/bash
# Probe 1: persistent m = 1 GEMVs with L2 prefetch of the next group, m >= 2 slab prefetch (B) against the baseline (A).
cd dist-pf && for v in A B; do xz -d -c sy-$v.xz > sy-$v && chmod +x sy-$v; done; cd ..
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/smi.txt
{
echo "== parity B"; dist-pf/sy-B parity --backend cuda --filter gemv 2>&1 | grep passed
for round in 1 2; do
  for v in A B; do
    echo "$v b1"; timeout 60 dist-pf/sy-$v bench-model --backend cuda --batch 1 2>&1 | grep "^| [0-9]"
  done
  echo "B b1 PDL"; SWITCHYARD_CUDA_PDL=1 timeout 60 dist-pf/sy-B bench-model --backend cuda --batch 1 2>&1 | grep "^| [0-9]"
done
for v in A B; do
  echo "$v b16"; timeout 60 dist-pf/sy-$v bench-model --backend cuda --batch 16 --steps 16 2>&1 | grep "^| [0-9]"
done
echo "B b16 PDL"; SWITCHYARD_CUDA_PDL=1 timeout 60 dist-pf/sy-B bench-model --backend cuda --batch 16 --steps 16 2>&1 | grep "^| [0-9]"
for v in A B; do
  echo "== $v kernel rows"; timeout 90 dist-pf/sy-$v bench --backend cuda --iters 20 --filter dense_gemv 2>&1 | grep "dense_gemv\|copy ceiling"
done
} > $OUT/probe1.txt 2>&1
