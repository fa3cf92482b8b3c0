#!/usr/bin/env bash
# Issue 12 item 3 (norms, qkv_prep), one H200 call. dist-norm/switchyard = this build
# (shared-memory ring entries), dist-norm/switchyard-old = 93b4bdf (register pipelines).
set -u
OUT=${OUT:-/tmp/h200}; mkdir -p "$OUT"
START=$SECONDS
# Binaries travel gzipped; only 8 files come back from $OUT: summary.txt and logs.tgz.
gunzip -c dist-norm/switchyard.gz > /tmp/sy-new && gunzip -c dist-norm/switchyard-old.gz > /tmp/sy-old && chmod +x /tmp/sy-new /tmp/sy-old
N=/tmp/sy-new; O=/tmp/sy-old
X=$OUT/summary.txt
L=/tmp/normlogs; mkdir -p $L
pack() { tar czf $OUT/logs.tgz -C $L . ; }
export SWITCHYARD_REQUIRE_CUDA=1
t() { echo "-- $((SECONDS - START)) s" >> $X; pack; }
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $X
K="rmsnorm_bf16 post_norm_add layer_out_bf16 qkv_prep"
# Phase 1, all correctness runs at once (no timing): parity, memcheck, racecheck; and a tiny
# bench-model to compile the model's modules into the cache for phase 3.
for f in $K; do
  (timeout 75 $N parity --backend cuda --filter $f > $L/parity_$f.txt 2>&1) &
  for tool in memcheck racecheck; do
    (timeout 75 compute-sanitizer --tool $tool $N parity --backend cuda --filter $f > $L/san_${tool}_$f.txt 2>&1) &
  done
done
(timeout 75 $O bench-model --backend cuda --batch 1 --steps 2 --layers 1 --prompt-len 8 > $L/warm.txt 2>&1) &
wait
echo "== parity cuda (new)" >> $X
for f in $K; do echo "$f: $(grep -E 'passed|FAIL|rror' $L/parity_$f.txt | tail -3 | tr '\n' ' ')" >> $X; done
echo "== sanitizers (new)" >> $X
for f in $K; do for tool in memcheck racecheck; do
  echo "$tool $f: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|passed' $L/san_${tool}_$f.txt | tr '\n' ' ')" >> $X
done; done; t
# Phase 2: kernel bench, old then new per kernel, then the copy of the rmsnorm row's bytes.
echo "== bench --iters 10 (old, new)" >> $X
for f in $K; do for b in old new; do
  B=$O; [ $b = new ] && B=$N
  timeout 20 $B bench --backend cuda --filter $f --iters 10 > $L/bench_${f}_$b.md 2>&1
  echo "$b | $(grep -o 'copy ceiling: [0-9.]* GB/s' $L/bench_${f}_$b.md) $(grep -E '^\| [a-z]' $L/bench_${f}_$b.md | grep -v '^| kernel' | tr '\n' ' ')" >> $X
done; done
timeout 20 $N bench --backend cuda --filter copy_u32 --iters 10 > $L/bench_copy_new.md 2>&1
echo "new | $(grep -o 'copy ceiling: [0-9.]* GB/s' $L/bench_copy_new.md) $(grep -E '^\| copy_u32' $L/bench_copy_new.md)" >> $X; t
# Phase 3: end to end, decode forms (rows < SMs take the unchanged register entries).
echo "== bench-model cuda default --batch 1,16 (old, new)" >> $X
for b in old new; do
  B=$O; [ $b = new ] && B=$N
  timeout 35 $B bench-model --backend cuda --batch 1,16 --steps 32 > $L/bench_model_$b.md 2>&1
  echo "$b: $(grep -E '^\| [0-9]' $L/bench_model_$b.md | tr '\n' ' ')" >> $X
done; t
# Phase 4: ncu for any kernel under its target, while time is left.
for f in $K; do
  target=85; [ $f = qkv_prep ] && target=70
  pct=$(grep -E "^\| $f" $L/bench_${f}_new.md | head -1 | awk -F'|' '{gsub(/[ %]/,"",$10); print $10}')
  [ -z "$pct" ] && continue
  if [ "$pct" -lt "$target" ] && [ $((SECONDS - START)) -lt 165 ]; then
    timeout 28 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy -k regex:${f} --launch-skip 4 --launch-count 1 $N bench --backend cuda --filter $f --iters 1 > $L/ncu_$f.txt 2>&1
    echo "ncu $f ($pct% < $target%): $(grep -E 'DRAM Throughput|Memory Throughput|Duration|Achieved Occupancy|Theoretical Occupancy' $L/ncu_$f.txt | tr -s ' ' | tr '\n' ';')" >> $X
  fi
done; t
cat $X
