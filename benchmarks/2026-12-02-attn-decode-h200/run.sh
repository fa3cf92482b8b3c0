#!/usr/bin/env bash
# Issue 12 item 3 (CUDA decode attention at long context), one H200 call:
# parity (default plan and each measurement override), compute-sanitizer
# memcheck + racecheck, the kernel bench old vs new with the copy ceiling,
# bench-model b1 / b16 old vs new, override variants, ncu on two cases.
# OLD = HEAD without the change, NEW = HEAD + the change (same tree otherwise).
set -u
export OUT=${OUT:-/tmp/h200}
mkdir -p "$OUT"
START=$SECONDS
D=./dist-attndec
OLD=$D/switchyard-old NEW=$D/switchyard-new
export SWITCHYARD_REQUIRE_CUDA=1 SWITCHYARD_CUDA_CACHE=/tmp/sycache
S=$OUT/summary.txt
left() { echo $((190 - (SECONDS - START))); }
t() { echo "-- $((SECONDS - START)) s" >> $S; }
$NEW info --backend cuda 2>&1 | grep -iE "device|arch|cluster|shared" | head -6 >> $S
# NVRTC cache warm-up for bench-model's modules (identical sources in both
# builds but attn.cu) beside the correctness runs, so no timed step compiles.
timeout 120 $OLD bench-model --backend cuda --batch 1 --layers 2 --steps 2 > $OUT/warm.txt 2>&1 &
WARM=$!
# Correctness: the default plan and the overrides in parallel, then the sanitizers.
P=()
timeout 40 $NEW parity --backend cuda --filter attention_decode > $OUT/parity_new.txt 2>&1 & P+=($!)
SWITCHYARD_ATTN_DECODE_TEAMS=1 timeout 40 $NEW parity --backend cuda --filter attention_decode > $OUT/parity_new_t1.txt 2>&1 & P+=($!)
SWITCHYARD_ATTN_DECODE_TEAMS=4 timeout 40 $NEW parity --backend cuda --filter attention_decode > $OUT/parity_new_t4.txt 2>&1 & P+=($!)
SWITCHYARD_ATTN_DECODE_CLUSTER=1 timeout 40 $NEW parity --backend cuda --filter attention_decode > $OUT/parity_new_cl.txt 2>&1 & P+=($!)
wait ${P[@]}
for f in new new_t1 new_t4 new_cl; do echo "parity $f: $(grep -E 'passed' $OUT/parity_$f.txt | tail -1) $(grep -c '| fail' $OUT/parity_$f.txt) fail rows" >> $S; done; t
timeout 50 compute-sanitizer --tool memcheck $NEW parity --backend cuda --filter attention_decode > $OUT/memcheck.txt 2>&1 & P=($!)
timeout 50 compute-sanitizer --tool racecheck $NEW parity --backend cuda --filter attention_decode > $OUT/racecheck.txt 2>&1 & P+=($!)
wait ${P[@]}
grep -hE "ERROR SUMMARY|RACECHECK SUMMARY|passed" $OUT/memcheck.txt $OUT/racecheck.txt >> $S; t
wait $WARM; echo "warm-up: $(tail -c 300 $OUT/warm.txt | tr '\n' ' ' | cut -c1-200)" >> $S; t
# Kernel bench, old then new (each with its copy ceiling).
for b in old new; do
  B=$D/switchyard-$b
  timeout 35 $B bench --backend cuda --filter attention_decode --iters 10 > $OUT/bench_$b.md 2>&1
  echo "== bench $b" >> $S; grep -E "copy ceiling|attention_decode" $OUT/bench_$b.md | cut -c1-200 >> $S; t
done
# bench-model, old then new.
for b in old new; do
  B=$D/switchyard-$b
  timeout 30 $B bench-model --backend cuda --batch 1,16 --steps 32 > $OUT/bench_model_$b.md 2>&1
  echo "== bench-model $b" >> $S; grep -E "^\| [0-9]|bound|copy" $OUT/bench_model_$b.md | head -6 >> $S; t
done
variant() {
  env SWITCHYARD_ATTN_DECODE_$1 timeout 30 $NEW bench --backend cuda --filter attention_decode --iters 10 > $OUT/bench_new_$1.md 2>&1
  echo "== bench new $1" >> $S; grep -E "copy ceiling|attention_decode" $OUT/bench_new_$1.md | cut -c1-200 >> $S; t
}
# Override variants of the new build and ncu, as time allows.
[ $(left) -gt 65 ] && variant TEAMS=4
for shape in "global b=1 ctx=16384" "sliding b=1 ctx=16384" "global b=16 ctx=16384"; do
  [ $(left) -gt 16 ] || break
  n=$(echo $shape | tr ' =' '__')
  SWITCHYARD_BENCH_ATTN_SHAPE="$shape" timeout 25 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section Occupancy -k regex:'^attention_decode$' --launch-skip 3 --launch-count 1 \
    $NEW bench --backend cuda --filter attention_decode --iters 1 > $OUT/ncu_$n.txt 2>&1
  echo "== ncu $shape" >> $S
  grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Block Limit|Stall|Warp Cycles Per Issued|Registers|Grid Size|Block Size" $OUT/ncu_$n.txt | head -24 >> $S; t
done
[ $(left) -gt 40 ] && variant CLUSTER=1
[ $(left) -gt 40 ] && variant TEAMS=1
cat $S
