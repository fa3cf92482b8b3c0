#!/usr/bin/env bash
# Lead's final call of the fourth session: the all-in-one checks and default-shape decode
# (h200_checks.sh: parity cuda + wgpu, memcheck + racecheck, HF fixtures, bench-model cuda/wgpu
# b1/b16 beside HF compile), then extras into one file: 26b-a4b and nvfp4 decode on cuda, repeats.
set -u
export OUT=${OUT:-/tmp/h200}
mkdir -p "$OUT"
START=$SECONDS
PARTS="checks decode" SANITIZERS="memcheck racecheck" SHAPES=default HF_MODES=compile DEADLINE=${DEADLINE:-330} \
    bash scripts/h200_checks.sh
X=$OUT/extras.txt
source .device-vk/env.sh
export SWITCHYARD_REQUIRE_CUDA=1
S=./dist/switchyard
echo "== extras start at $((SECONDS - START)) s" >> $X
$S info --backend cuda 2>&1 | grep -iE "cluster|cuda arch" >> $X
for r in 1 2; do
  echo "== cuda default b1 (repeat $r)" >> $X
  timeout 30 $S bench-model --backend cuda --batch 1 --steps 32 2>&1 | grep "^| [0-9]" >> $X
  echo "== wgpu default b1 (repeat $r)" >> $X
  timeout 45 $S bench-model --backend wgpu --batch 1 --steps 16 2>&1 | grep "^| [0-9]" >> $X
done
echo "== cuda default b1 / b16 with SWITCHYARD_CUDA_PDL=1 (informational; off by default)" >> $X
SWITCHYARD_CUDA_PDL=1 timeout 30 $S bench-model --backend cuda --batch 1 --steps 32 2>&1 | grep "^| [0-9]" >> $X
SWITCHYARD_CUDA_PDL=1 timeout 30 $S bench-model --backend cuda --batch 16 --steps 16 2>&1 | grep "^| [0-9]" >> $X
echo "== cuda 26b-a4b b1" >> $X
timeout 45 $S bench-model --backend cuda --shape 26b-a4b --batch 1 --steps 32 >> $X 2>&1
echo "== cuda nvfp4 b1" >> $X
timeout 45 $S bench-model --backend cuda --quant nvfp4 --batch 1 --steps 32 2>&1 | grep "^| [0-9]" >> $X
echo "== done at $((SECONDS - START)) s" >> $X
cat $X
tail -45 $OUT/summary.txt
