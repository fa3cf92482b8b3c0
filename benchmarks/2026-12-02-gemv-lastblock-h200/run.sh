#!/bin/bash
# The m >= 2 GEMV's K-split partials added by the last block of a column (one launch) against
# the two-pass plan (0ec8fee = dist-me7/switchyard-tile): parity + memcheck, kernel rows, bench-model.
set -u
for f in dist-me7b/*.xz dist-me7/switchyard-tile.xz; do xz -dk "$f" 2>/dev/null || xz -d "$f"; done
chmod +x dist-me7b/switchyard-gemv1 dist-me7/switchyard-tile
export SWITCHYARD_REQUIRE_CUDA=1
N=./dist-me7b/switchyard-gemv1; O=./dist-me7/switchyard-tile
X=$OUT/gemv1.txt
timeout 60 $N parity --backend cuda --filter dense_gemv > $OUT/parity.txt 2>&1; grep "^cuda: \|FAIL" $OUT/parity.txt >> $X
timeout 90 compute-sanitizer --tool memcheck $N parity --backend cuda --filter dense_gemv 2>&1 | grep -E "^cuda: |SUMMARY" | sed "s/^/memcheck: /" >> $X
timeout 60 $N parity --backend cuda --filter gelu > $OUT/parity2.txt 2>&1; grep "^cuda: \|FAIL" $OUT/parity2.txt >> $X
echo "-- $SECONDS s" >> $X
for b in $O $N $O $N; do
  echo "# $b" >> $X
  timeout 60 $b bench --backend cuda --iters 10 --filter dense_gemv 2>&1 | grep -E "copy|m=16|m=8|m=2 " | grep -v "^| kernel" >> $X
done
echo "-- $SECONDS s" >> $X
bm() { local tag=$1; shift; timeout 60 "$@" 2>&1 | grep "^| [0-9]" | sed "s/^/$tag /" >> $X; }
for r in 1 2 3; do
  bm "old b16" $O bench-model --backend cuda --batch 16 --steps 24
  bm "new b16" $N bench-model --backend cuda --batch 16 --steps 24
done
bm "old b1" $O bench-model --backend cuda --batch 1 --steps 24
bm "new b1" $N bench-model --backend cuda --batch 1 --steps 24
bm "old 26b b16" $O bench-model --backend cuda --shape 26b-a4b --batch 16 --steps 16
bm "new 26b b16" $N bench-model --backend cuda --shape 26b-a4b --batch 16 --steps 16
echo "-- $SECONDS s" >> $X
cat $X
