#!/usr/bin/env bash
# Call 4: the plan's one pass within a wave / two passes past it (default) against the
# two launches (SWITCHYARD_SANDWICH_UNFUSED=1), and the forced one pass
# (SWITCHYARD_CUDA_SANDWICH_PASSES=1) at the default shape, alternating, one binary.
set -u
export OUT=${OUT:-/tmp/h200}
mkdir -p "$OUT"
START=$SECONDS
X=$OUT/summary.txt
export SWITCHYARD_REQUIRE_CUDA=1 SWITCHYARD_CUDA_CACHE=/tmp/sy-cubins
S=./dist-sw/switchyard
t() { echo "-- $((SECONDS - START)) s" >> $X; }
timeout 60 $S parity --backend cuda --filter gelu > $OUT/parity.txt 2>&1
SWITCHYARD_CUDA_SANDWICH_PASSES=2 timeout 60 $S parity --backend cuda --filter sandwich >> $OUT/parity.txt 2>&1
SWITCHYARD_CUDA_SANDWICH_PASSES=1 timeout 60 $S parity --backend cuda --filter sandwich >> $OUT/parity.txt 2>&1
echo "== parity cuda --filter gelu, then sandwich at PASSES=2 and PASSES=1" >> $X; grep "passed\|FAIL" $OUT/parity.txt | tail -6 >> $X; t
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
  bm "fused (2 passes) r$r" X=0
  bm "fused 1 pass r$r" SWITCHYARD_CUDA_SANDWICH_PASSES=1
done; t
echo "== bench-model 26b-a4b, batch 1" >> $X
BM="--batch 1 --shape 26b-a4b"
timeout 100 $S bench-model --backend cuda --steps 4 $BM > /dev/null 2>&1
for r in 1 2; do
  bm "unfused r$r" SWITCHYARD_SANDWICH_UNFUSED=1
  bm "fused (1 pass) r$r" X=0
done; t
cd $OUT && tar czf raw.tgz parity.txt san_*.txt && rm -f parity.txt san_*.txt
