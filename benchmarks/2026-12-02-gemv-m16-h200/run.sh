#!/usr/bin/env bash
# Issue 12, helper h1: the CUDA m >= 2 GEMVs of the batch-16 decode step, A/B in one device call (<= 150 s).
# A = dist-h1/before (abc460a), B = dist-h1/after (abc460a + gemv.cu / gemv/mod.rs of this change):
# the activation chunk staged with cp.async (every copy of a thread in flight at once, instead of a
# load-then-store loop that waited one L2 round trip per 16 bytes) and the split-K reduce passes launched
# as programmatic dependents. Variants of B by measurement override:
#   C = SWITCHYARD_CUDA_GEMV_REDUCE_SERIAL=1   (the reduce as before: cp.async staging alone)
#   D = SWITCHYARD_CUDA_GEMV_UNSPLIT_BLOCKS=132 (gate/up in one launch: 160 blocks over the whole K)
#   E = SWITCHYARD_CUDA_GEMV_SPLIT_SMS=1 (the fewest K chunks that give every SM a block: q/k/v 5, o 7, down 10)
# here: cargo build --release -p switchyard-cli (A at abc460a, B with the change); strip into dist-h1/
# there (carry dist-h1): bash dist-h1/run.sh
set -u
export OUT=${OUT:-/tmp/h1-out}
R=$OUT/raw
mkdir -p "$R"
X=$OUT/summary.txt
START=$SECONDS
export SWITCHYARD_REQUIRE_CUDA=1 SWITCHYARD_CUDA_CACHE=/tmp/sy-cubins-h1
A=./dist-h1/before
B=./dist-h1/after
chmod +x $A $B
t() { echo "-- $((SECONDS - START)) s" >> $X; }
left() { [ $((SECONDS - START)) -lt "$1" ]; } # still before second $1 of the call
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $X
# Correctness first, while one short decode run per binary fills the cubin cache (the binaries differ
# in gemv.cu only, so A's run compiles that module alone).
( timeout 75 $B bench-model --backend cuda --batch 1 --steps 2 > $R/warm_B.txt 2>&1; timeout 30 $A bench-model --backend cuda --batch 1 --steps 2 > $R/warm_A.txt 2>&1 ) &
par() { # tag filter bin env...
  local tag=$1 f=$2 bin=$3; shift 3
  env "$@" timeout 40 $bin parity --backend cuda --filter $f > $R/parity_${tag}_$f.txt 2>&1
  echo "parity $tag --filter $f: $(grep -E "^cuda: " $R/parity_${tag}_$f.txt | tail -1)" >> $X
}
par A dense_gemv $A X=0; par A gelu $A X=0
par B dense_gemv $B X=0; par B gelu $B X=0
par C dense_gemv $B SWITCHYARD_CUDA_GEMV_REDUCE_SERIAL=1; par C gelu $B SWITCHYARD_CUDA_GEMV_REDUCE_SERIAL=1
# Every m >= 2 case in one chunk (the unsplit path at K up to 2048).
par D1 dense_gemv $B SWITCHYARD_CUDA_GEMV_UNSPLIT_BLOCKS=1; par D1 gelu $B SWITCHYARD_CUDA_GEMV_UNSPLIT_BLOCKS=1
par E dense_gemv $B SWITCHYARD_CUDA_GEMV_SPLIT_SMS=1; par E gelu $B SWITCHYARD_CUDA_GEMV_SPLIT_SMS=1
wait
# The per-case error figures: identical to A's where the sums' order is unchanged (B, C).
for v in B C D1 E; do
  for f in dense_gemv gelu; do
    d=$(diff <(grep "| cuda |" $R/parity_A_$f.txt) <(grep "| cuda |" $R/parity_${v}_$f.txt) | grep -c "^>")
    echo "parity $v --filter $f: $d case lines differ from A's" >> $X
  done
done
grep -E "^\| 1 " $R/warm_B.txt | tail -1 | sed 's/^/warm B: /' >> $X
grep -E "^\| 1 " $R/warm_A.txt | tail -1 | sed 's/^/warm A: /' >> $X; t
bm() { # tag bin env...
  local tag=$1 bin=$2; shift 2
  left 132 || return
  env "$@" timeout 15 $bin bench-model --backend cuda --batch 16,1 --steps 32 > $R/bm_$tag.txt 2>&1
  grep -E "^\| (1|16) \|" $R/bm_$tag.txt | sed "s/^/bm $tag: /" >> $X
}
bn() { # start-before-second tag bin env...
  local lim=$1 tag=$2 bin=$3; shift 3
  left $lim || return
  env "$@" timeout 26 $bin bench --backend cuda --iters 10 --filter dense_gemv > $R/bench_$tag.txt 2>&1
  grep -m1 "copy ceiling" $R/bench_$tag.txt | sed "s/^/bench $tag: /" >> $X
  grep -E "^\| dense_gemv" $R/bench_$tag.txt | sed "s/^/bench $tag: /" >> $X
}
# Priority order (the call is cut at 150 s): A/B rounds and rows first, the variants last.
echo "== bench-model --batch 16,1 --steps 32 (| batch | tok/s | ms/token | ms/step (median, min..max) | MB | experts | bound | % | prefill ms |)" >> $X
bm A1 $A X=0; bm B1 $B X=0; t
echo "== bench --iters 10 --filter dense_gemv" >> $X
bn 100 A $A X=0; bn 100 B $B X=0; t
bm A2 $A X=0; bm B2 $B X=0; bm C1 $B SWITCHYARD_CUDA_GEMV_REDUCE_SERIAL=1; bm D1 $B SWITCHYARD_CUDA_GEMV_UNSPLIT_BLOCKS=132; bm E1 $B SWITCHYARD_CUDA_GEMV_SPLIT_SMS=1; t
bm A3 $A X=0; bm B3 $B X=0; bm C2 $B SWITCHYARD_CUDA_GEMV_REDUCE_SERIAL=1; bm D2 $B SWITCHYARD_CUDA_GEMV_UNSPLIT_BLOCKS=132; bm E2 $B SWITCHYARD_CUDA_GEMV_SPLIT_SMS=1; t
bm A4 $A X=0; bm B4 $B X=0; t
bn 118 D $B SWITCHYARD_CUDA_GEMV_UNSPLIT_BLOCKS=132; t
( cd "$OUT" && tar czf raw.tgz raw && rm -rf raw )
