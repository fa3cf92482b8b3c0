#!/usr/bin/env bash
# The sandwich fused into the gate/up GEMV at batch 1 (dense_gemv_sandwich_gelu_mul_bf16)
# and the layer-output prologue with the row in registers (gemv_m1_layer_out_cached).
# Call 1 (8 warps a block, call1_summary.txt) ran an earlier form of this script.
# Call 2: dist-sw/switchyard-b2d0ff5 (the old three-pass prologue) against dist-sw/switchyard
# (the cached prologue, in the q/k/v GEMV too), each with the sandwich fused at 16 or 8
# warps a block (SWITCHYARD_CUDA_SANDWICH_SLOTS) or unfused (SWITCHYARD_SANDWICH_UNFUSED=1),
# alternating in one call.
set -u
export OUT=${OUT:-/tmp/h200}
mkdir -p "$OUT"
START=$SECONDS
X=$OUT/summary.txt
export SWITCHYARD_REQUIRE_CUDA=1 SWITCHYARD_CUDA_CACHE=/tmp/sy-cubins
S=./dist-sw/switchyard
O=./dist-sw/switchyard-b2d0ff5
t() { echo "-- $((SECONDS - START)) s" >> $X; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader >> $X
timeout 60 $S parity --backend cuda --filter gemv > $OUT/parity.txt 2>&1
echo "== parity cuda --filter gemv" >> $X; grep "passed\|FAIL" $OUT/parity.txt | tail -4 >> $X; t
for tool in memcheck racecheck; do
  for f in sandwich layer_out; do
    timeout 40 compute-sanitizer --tool $tool $S parity --backend cuda --filter $f > $OUT/san_${tool}_$f.txt 2>&1
    echo "rc=$?" >> $OUT/san_${tool}_$f.txt
    grep -E "^cuda: |SUMMARY|^rc=" $OUT/san_${tool}_$f.txt | sed "s/^/$tool $f: /" >> $X
  done
done; t
bm() { local tag=$1 bin=$2; shift 2; env "$@" timeout 40 $bin bench-model --backend cuda --steps 32 $BM 2>&1 | grep "^| [0-9]" | sed "s/^/$tag /" >> $X; }
echo "== bench-model default, batch 1" >> $X
BM="--batch 1"
timeout 100 $S bench-model --backend cuda --steps 4 $BM > /dev/null 2>&1  # NVRTC compiles
timeout 100 $O bench-model --backend cuda --steps 4 $BM > /dev/null 2>&1
for r in 1 2 3; do
  bm "old unfused r$r" $O SWITCHYARD_SANDWICH_UNFUSED=1
  bm "new unfused r$r" $S SWITCHYARD_SANDWICH_UNFUSED=1
  bm "old fused16 r$r" $O X=0
  bm "new fused16 r$r" $S X=0
  bm "new fused8 r$r" $S SWITCHYARD_CUDA_SANDWICH_SLOTS=8
done; t
echo "== bench-model 26b-a4b, batch 1" >> $X
BM="--batch 1 --shape 26b-a4b"
timeout 100 $S bench-model --backend cuda --steps 4 $BM > /dev/null 2>&1
for r in 1 2; do
  bm "old unfused r$r" $O SWITCHYARD_SANDWICH_UNFUSED=1
  bm "new unfused r$r" $S SWITCHYARD_SANDWICH_UNFUSED=1
  bm "new fused16 r$r" $S X=0
done; t
cd $OUT && tar czf raw.tgz parity.txt san_*.txt && rm -f parity.txt san_*.txt
