#!/usr/bin/env bash
# Call 3: the persistent whole-row entry (dense_gemv_sandwich_gelu_mul_bf16_walk, one wave
# of blocks whose warps walk the outputs, the prologue once a block) against the two
# launches (SWITCHYARD_SANDWICH_UNFUSED=1) and the one-output-a-warp grid
# (SWITCHYARD_CUDA_SANDWICH_WALK=0), 16 and 8 warps a block, alternating, one binary.
set -u
export OUT=${OUT:-/tmp/h200}
mkdir -p "$OUT"
START=$SECONDS
X=$OUT/summary.txt
export SWITCHYARD_REQUIRE_CUDA=1 SWITCHYARD_CUDA_CACHE=/tmp/sy-cubins
S=./dist-sw/switchyard
t() { echo "-- $((SECONDS - START)) s" >> $X; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader >> $X
timeout 60 $S parity --backend cuda --filter gelu > $OUT/parity.txt 2>&1
SWITCHYARD_CUDA_SANDWICH_SLOTS=8 timeout 60 $S parity --backend cuda --filter sandwich >> $OUT/parity.txt 2>&1
echo "== parity cuda --filter gelu, then sandwich at 8 warps" >> $X; grep "passed\|FAIL" $OUT/parity.txt | tail -4 >> $X; t
for tool in memcheck racecheck; do
  timeout 40 compute-sanitizer --tool $tool $S parity --backend cuda --filter sandwich > $OUT/san_$tool.txt 2>&1
  echo "rc=$?" >> $OUT/san_$tool.txt
  grep -E "^cuda: |SUMMARY|^rc=" $OUT/san_$tool.txt | sed "s/^/$tool: /" >> $X
done; t
bm() { local tag=$1; shift; env "$@" timeout 40 $S bench-model --backend cuda --steps 32 $BM 2>&1 | grep "^| [0-9]" | sed "s/^/$tag /" >> $X; }
echo "== bench-model default, batch 1" >> $X
BM="--batch 1"
timeout 100 $S bench-model --backend cuda --steps 4 $BM > /dev/null 2>&1  # NVRTC compiles
for r in 1 2 3; do
  bm "unfused r$r" SWITCHYARD_SANDWICH_UNFUSED=1
  bm "walk16 r$r" X=0
  bm "walk8 r$r" SWITCHYARD_CUDA_SANDWICH_SLOTS=8
  bm "whole16 r$r" SWITCHYARD_CUDA_SANDWICH_WALK=0
done; t
echo "== bench-model 26b-a4b, batch 1" >> $X
BM="--batch 1 --shape 26b-a4b"
timeout 100 $S bench-model --backend cuda --steps 4 $BM > /dev/null 2>&1
for r in 1 2; do
  bm "unfused r$r" SWITCHYARD_SANDWICH_UNFUSED=1
  bm "walk16 r$r" X=0
  bm "whole16 r$r" SWITCHYARD_CUDA_SANDWICH_WALK=0
done; t
timeout 30 $S bench --backend cuda --iters 10 --filter gelu_mul > $OUT/bench.txt 2>&1; grep -E "ceiling|^\| dense_gemv" $OUT/bench.txt | cut -c1-200 >> $X
cd $OUT && tar czf raw.tgz parity.txt san_*.txt bench.txt && rm -f parity.txt san_*.txt bench.txt
