#!/bin/bash
# Probe 2: PDL only where the dependent preloads its weights (G: the GEMVs of both paths and the W4A16 decode;
# H: the m = 1 GEMVs and the W4A16 decode), against the committed declarations (base) with and without PDL.
cd dist-pdl && for v in base G H; do xz -d -c sy-$v.xz > sy-$v && chmod +x sy-$v; done; cd ..
{
echo "== parity H, PDL on"; SWITCHYARD_CUDA_PDL=1 dist-pdl/sy-H parity --backend cuda --filter gemv 2>&1 | grep passed
SWITCHYARD_CUDA_PDL=1 dist-pdl/sy-G parity --backend cuda --filter dense_gemv 2>&1 | grep passed
for round in 1 2; do
  echo "base b1"; timeout 60 dist-pdl/sy-base bench-model --backend cuda --batch 1 2>&1 | grep "^| [0-9]"
  echo "base b1 PDL"; SWITCHYARD_CUDA_PDL=1 timeout 60 dist-pdl/sy-base bench-model --backend cuda --batch 1 2>&1 | grep "^| [0-9]"
  echo "G b1 PDL"; SWITCHYARD_CUDA_PDL=1 timeout 60 dist-pdl/sy-G bench-model --backend cuda --batch 1 2>&1 | grep "^| [0-9]"
  echo "H b1 PDL"; SWITCHYARD_CUDA_PDL=1 timeout 60 dist-pdl/sy-H bench-model --backend cuda --batch 1 2>&1 | grep "^| [0-9]"
done
echo "base b16"; timeout 60 dist-pdl/sy-base bench-model --backend cuda --batch 16 --steps 16 2>&1 | grep "^| [0-9]"
echo "G b16 PDL"; SWITCHYARD_CUDA_PDL=1 timeout 60 dist-pdl/sy-G bench-model --backend cuda --batch 16 --steps 16 2>&1 | grep "^| [0-9]"
echo "H b16 PDL"; SWITCHYARD_CUDA_PDL=1 timeout 60 dist-pdl/sy-H bench-model --backend cuda --batch 16 --steps 16 2>&1 | grep "^| [0-9]"
echo "H 26b-a4b b1 PDL"; SWITCHYARD_CUDA_PDL=1 timeout 90 dist-pdl/sy-H bench-model --backend cuda --shape 26b-a4b --batch 1 2>&1 | grep "^| [0-9]"
echo "base 26b-a4b b1"; timeout 90 dist-pdl/sy-base bench-model --backend cuda --shape 26b-a4b --batch 1 2>&1 | grep "^| [0-9]"
} > $OUT/probe2.txt 2>&1
