#!/usr/bin/env bash
# One H200 call (issue 12 item 3, head and gathers): parity of the changed
# kernels on cuda, the bench rows A/B against the build before (dist-head/
# switchyard-base = dist/switchyard of 18c9cd3, whose head/embed sources are
# unchanged up to 93b4bdf), bench-model before/after, memcheck + racecheck,
# then ncu on any kernel still short of its target while time is left.
set -u
OUT=${OUT:-/tmp/h200}
mkdir -p "$OUT"
START=$SECONDS
LIMIT=${LIMIT:-190}
X=$OUT/summary.txt
export SWITCHYARD_REQUIRE_CUDA=1
N=./dist-head/switchyard
B=./dist-head/switchyard-base
t() { echo "-- $((SECONDS - START)) s" >> "$X"; }
left() { echo $((LIMIT - (SECONDS - START))); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader >> "$X"
$N info --backend cuda 2>&1 | grep -iE "device|cuda arch|multiproc" | head -4 >> "$X"

echo "== parity cuda (new build)" >> "$X"
for f in argmax_rows gather lm_head letter; do
  timeout 40 $N parity --backend cuda --filter $f > "$OUT/parity_$f.txt" 2>&1
  echo "$f: $(grep -E 'passed' "$OUT/parity_$f.txt" | tail -1)" >> "$X"
  grep -E "FAIL|fail " "$OUT/parity_$f.txt" | head -5 >> "$X"
done; t

echo "== bench (new, base, new, base for argmax)" >> "$X"
bench() { # bin tag filter
  timeout 45 $1 bench --backend cuda --filter $3 --iters 10 --json > "$OUT/bench_$3_$2.json" 2> "$OUT/bench_$3_$2.err"
  python3 - "$OUT/bench_$3_$2.json" "$2" >> "$X" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print(sys.argv[2], "no result:", e); sys.exit()
print(f"{sys.argv[2]} copy {d['copy_gb_per_s']:.1f} GB/s, launch {d['launch_overhead_us']:.2f} us")
for c in d["cases"]:
    print(f"{sys.argv[2]} | {c['kernel']} | {c['shape']} | {c['median_ms']*1e3:.2f} us ({c['min_ms']*1e3:.2f}..{c['max_ms']*1e3:.2f}) | {c['pct_of_copy']:.1f}% |")
PY
}
bench $N new argmax_rows; bench $B base argmax_rows; bench $N new2 argmax_rows; bench $B base2 argmax_rows
bench $N new gather; bench $B base gather
bench $N new lm_head_logits; bench $B base lm_head_logits; t

echo "== bench-model cuda default, batch 1,16 (base, new, base, new), then --quant fp8-embed" >> "$X"
for b in base new base2 new2; do
  bin=$N; case $b in base*) bin=$B;; esac
  timeout 40 $bin bench-model --backend cuda --batch 1,16 --steps 32 > "$OUT/bm_$b.md" 2>&1
  grep -E "^\| [0-9]" "$OUT/bm_$b.md" | sed "s/^/$b /" >> "$X"
done; t
for b in base new; do
  bin=$N; case $b in base*) bin=$B;; esac
  [ "$(left)" -gt 95 ] || break
  timeout 40 $bin bench-model --backend cuda --quant fp8-embed --batch 1,16 --steps 32 > "$OUT/bm_fp8_$b.md" 2>&1
  grep -E "^\| [0-9]" "$OUT/bm_fp8_$b.md" | sed "s/^/fp8-embed $b /" >> "$X"
done; t

echo "== compute-sanitizer memcheck, racecheck (new build; the two tools side by side)" >> "$X"
san() { # tool
  for f in argmax_rows gather lm_head; do
    timeout 55 compute-sanitizer --tool $1 $N parity --backend cuda --filter $f > "$OUT/${1}_$f.txt" 2>&1
    echo "$1 $f: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|hazard' "$OUT/${1}_$f.txt" | tail -1) | $(grep -E 'passed' "$OUT/${1}_$f.txt" | tail -1)" >> "$OUT/san_$1.txt"
  done
}
san memcheck & P1=$!
san racecheck & P2=$!
wait $P1 $P2
cat "$OUT/san_memcheck.txt" "$OUT/san_racecheck.txt" >> "$X"; t

# ncu on the kernels still short (percent of copy from the new build's bench rows).
pct() { # kernel shape-prefix filter: the new build's % of copy, as an integer
  python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
print(next((int(c['pct_of_copy']) for c in d['cases'] if c['kernel'] == sys.argv[2] and c['shape'].startswith(sys.argv[3])), 0))
" "$OUT/bench_$3_new.json" "$1" "$2" 2>/dev/null || echo 0
}
NCU="ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy"
p=$(pct argmax_rows m=16 argmax_rows); echo "argmax new: ${p:-?}%" >> "$X"
if [ "${p:-0}" -lt 70 ] && [ "$(left)" -gt 25 ]; then
  timeout $(( $(left) < 40 ? $(left) : 40 )) $NCU -k regex:'^argmax_rows$' --launch-skip 3 --launch-count 1 $N bench --backend cuda --filter argmax_rows --iters 1 > "$OUT/ncu_argmax.txt" 2>&1
  grep -E "Duration|DRAM Throughput|Memory Throughput|Registers|Achieved Occupancy" "$OUT/ncu_argmax.txt" | head -8 >> "$X"; t
fi
p=$(pct lm_head_logits_fp8 m=16 lm_head_logits); echo "lm_head fp8 m16 new: ${p:-?}%" >> "$X"
if [ "${p:-0}" -lt 80 ] && [ "$(left)" -gt 30 ]; then
  timeout $(( $(left) < 50 ? $(left) : 50 )) $NCU --section ComputeWorkloadAnalysis --section WarpStateStats -k regex:'^lm_head_logits_fp8_mma$' --launch-count 1 $N bench --backend cuda --filter lm_head_logits_fp8 --iters 1 > "$OUT/ncu_lm_head.txt" 2>&1
  grep -E "Duration|DRAM Throughput|Memory Throughput|Compute \(SM\) Throughput|Registers|Achieved Occupancy|Issue Slots Busy|Stall" "$OUT/ncu_lm_head.txt" | head -12 >> "$X"; t
fi
for k in embed_gather_bf16 embed_gather_fp8; do
  p=$(pct $k rows gather); echo "$k new: ${p:-?}%" >> "$X"
  if [ "${p:-0}" -lt 80 ] && [ "$(left)" -gt 25 ]; then
    timeout $(( $(left) < 35 ? $(left) : 35 )) $NCU -k regex:"^$k\$" --launch-count 1 $N bench --backend cuda --filter $k --iters 1 > "$OUT/ncu_$k.txt" 2>&1
    grep -E "Duration|DRAM Throughput|Memory Throughput|Registers|Achieved Occupancy" "$OUT/ncu_$k.txt" | head -8 >> "$X"; t
  fi
done
t
cat "$X"
