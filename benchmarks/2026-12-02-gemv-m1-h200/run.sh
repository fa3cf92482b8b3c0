#!/usr/bin/env bash
# Issue 12, helper hB: the CUDA m = 1 GEMVs of the decode step, A/B in one device call (<= 150 s).
# A = dist-hB/before (61270cf), B = dist-hB/after (61270cf + gemv.cu / gemv/mod.rs of this change):
# q/k/v (the x2 fused-norm entries) issue every weight load of a lane's slice before the wait and the
# norm prologue, the normalised row is formed once a block in shared memory, a one-slice slot stores
# without the shared-memory meeting. B's o/down geometry by SWITCHYARD_CUDA_GEMV_M1: unset (the slices
# plan, as A), walk (dense_gemv_bf16_m1_walk), fine (half the loads a lane, twice the blocks).
# here: cargo build --release -p switchyard-cli (A in a 61270cf tree, B with the change); strip into dist-hB/
# there (carry dist-hB): bash benchmarks/2026-12-02-gemv-m1-h200/run.sh
set -u
export OUT=${OUT:-/tmp/hB-out}
R=$OUT/raw
mkdir -p "$R"
X=$OUT/summary.txt
START=$SECONDS
export SWITCHYARD_REQUIRE_CUDA=1 SWITCHYARD_CUDA_CACHE=/tmp/sy-cubins-hB
A=./dist-hB/before
B=./dist-hB/after
chmod +x $A $B
t() { echo "-- $((SECONDS - START)) s" >> $X; }
left() { [ $((SECONDS - START)) -lt "$1" ]; } # still before second $1 of the call
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $X
# Correctness first, while one short decode run fills the cubin cache for every decode module.
( timeout 70 $B bench-model --backend cuda --batch 1 --steps 2 > $R/warm.txt 2>&1 ) &
par() { # tag bin env...
  local tag=$1 bin=$2; shift 2
  env "$@" timeout 40 $bin parity --backend cuda --filter gemv > $R/parity_$tag.txt 2>&1
  echo "parity $tag: $(grep -E "^cuda: " $R/parity_$tag.txt | tail -1)" >> $X
}
par A $A X=0
par B $B X=0
par B_walk $B SWITCHYARD_CUDA_GEMV_M1=walk
par B_fine $B SWITCHYARD_CUDA_GEMV_M1=fine
wait
# The per-case error figures: identical to A's where the sums' order is unchanged.
for v in B B_walk B_fine; do
  d=$(diff <(grep "| cuda |" $R/parity_A.txt) <(grep "| cuda |" $R/parity_$v.txt) | grep -c "^>")
  echo "parity $v: $d case lines differ from A's" >> $X
done
grep -E "^\| 1 " $R/warm.txt | tail -1 | sed 's/^/warm: /' >> $X; t
bm() { # tag batches bin env...
  local tag=$1 batches=$2 bin=$3; shift 3
  left 120 || return
  env "$@" timeout 25 $bin bench-model --backend cuda --batch $batches --steps 32 > $R/bm_$tag.txt 2>&1
  grep -E "^\| (1|16) \|" $R/bm_$tag.txt | sed "s/^/bm $tag: /" >> $X
}
bn() { # tag bin env...
  local tag=$1 bin=$2; shift 2
  left 120 || return
  env "$@" timeout 25 $bin bench --backend cuda --iters 10 --filter dense_gemv > $R/bench_$tag.txt 2>&1
  grep -m1 "copy ceiling" $R/bench_$tag.txt | sed "s/^/bench $tag: /" >> $X
  grep -E "^\| dense_gemv" $R/bench_$tag.txt | sed "s/^/bench $tag: /" >> $X
}
# Priority order (the call is cut at 150 s): A/B rounds and rows first, the o/down variants between.
echo "== bench-model (| batch | tok/s | ms/token | ms/step (median, min..max) | MB | experts | bound | % | prefill ms |)" >> $X
bm A1 1,16 $A X=0; bm B1 1,16 $B X=0; bm B_walk1 1 $B SWITCHYARD_CUDA_GEMV_M1=walk; bm B_fine1 1 $B SWITCHYARD_CUDA_GEMV_M1=fine; t
echo "== bench --iters 10 --filter dense_gemv" >> $X
bn A $A X=0; bn B $B X=0; t
bm A2 1,16 $A X=0; bm B2 1,16 $B X=0; bm B_walk2 1 $B SWITCHYARD_CUDA_GEMV_M1=walk; bm B_fine2 1 $B SWITCHYARD_CUDA_GEMV_M1=fine; t
bn B_walk $B SWITCHYARD_CUDA_GEMV_M1=walk; bn B_fine $B SWITCHYARD_CUDA_GEMV_M1=fine; t
( cd "$OUT" && tar czf raw.tgz raw && rm -rf raw )
