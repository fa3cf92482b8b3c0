#!/usr/bin/env bash
# The sandwich fused into the gate/up GEMV at batch 1 (dense_gemv_sandwich_gelu_mul_bf16):
# parity and both sanitizers over its cases, then bench-model A/B in one binary
# (SWITCHYARD_SANDWICH_UNFUSED=1 is the two-launch path), alternating. Call 1 ran
# 8 slots a block (call1_summary.txt); call 2 runs 16 and 8.
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
echo "== parity cuda --filter gelu" >> $X; grep "sandwich\|passed\|FAIL" $OUT/parity.txt | tail -14 >> $X; t
for tool in memcheck racecheck; do
  timeout 60 compute-sanitizer --tool $tool $S parity --backend cuda --filter sandwich > $OUT/san_$tool.txt 2>&1
  echo "rc=$?" >> $OUT/san_$tool.txt
  grep -E "^cuda: |SUMMARY|hazards|^rc=" $OUT/san_$tool.txt | sed "s/^/$tool: /" >> $X
done; t
bm() { local tag=$1; shift; env "$@" timeout 40 $S bench-model --backend cuda --steps 32 $BM 2>&1 | grep "^| [0-9]" | sed "s/^/$tag /" >> $X; }
# Call 2 (16 slots a block by default): unfused, fused at 16 and at 8 slots, alternating.
echo "== bench-model default, batch 1" >> $X
BM="--batch 1"
timeout 100 $S bench-model --backend cuda --steps 4 --batch 1 > /dev/null 2>&1  # NVRTC compiles
for r in 1 2 3; do bm "fused16 r$r" X=0; bm "unfused r$r" SWITCHYARD_SANDWICH_UNFUSED=1; bm "fused8 r$r" SWITCHYARD_CUDA_SANDWICH_SLOTS=8; done; t
echo "== bench-model 26b-a4b, batch 1" >> $X
BM="--batch 1 --shape 26b-a4b"
timeout 100 $S bench-model --backend cuda --steps 4 $BM > /dev/null 2>&1
for r in 1 2; do bm "fused16 r$r" X=0; bm "unfused r$r" SWITCHYARD_SANDWICH_UNFUSED=1; bm "fused8 r$r" SWITCHYARD_CUDA_SANDWICH_SLOTS=8; done; t
cd $OUT && tar czf raw.tgz parity.txt san_*.txt && rm -f parity.txt san_*.txt
