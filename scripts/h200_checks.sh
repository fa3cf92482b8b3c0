#!/usr/bin/env bash
# Every GPU check and benchmark of the project in one device call:
# parity on cuda and wgpu, compute-sanitizer (memcheck, racecheck, initcheck)
# over `parity` and `generate` on cuda, the HF fixtures on cuda and wgpu,
# the kernel bench on both, bench-model on both, and HF's decode bench.
#
# Here:  cargo build --release -p switchyard-cli && mkdir -p dist &&
#        cp target/release/switchyard dist/ && strip dist/switchyard &&
#        bash scripts/prepare-vulkan.sh .device-vk
# There: bash scripts/h200_checks.sh     (carry dist and .device-vk; writes to $OUT)
# Each step has a time limit so one slow step cannot eat the others' time.
# BEFORE=dist/switchyard-before (optional): an older build whose kernel bench
# and bench-model run in the same call, for a before/after table.
# QUICK=1 skips the sanitizers and HF's decode bench.
set -u
S=${S:-./dist/switchyard}
BEFORE=${BEFORE:-}
QUICK=${QUICK:-}
OUT=${OUT:-/tmp/h200}
mkdir -p "$OUT"
SUM=$OUT/summary.txt
export SWITCHYARD_REQUIRE_CUDA=1
step() { # name, seconds, file, command...
    local name=$1 secs=$2 file=$3; shift 3
    local t0=$SECONDS
    echo "== $name" >> "$file"
    timeout "$secs" "$@" >> "$file" 2>&1
    local rc=$?
    echo "$name: rc=$rc ($((SECONDS - t0)) s)" | tee -a "$SUM"
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$SUM"

# Correctness first (not timed); the three sanitizers run meanwhile, side by side.
SANS=()
TOOLS="memcheck racecheck initcheck"
[ -n "$QUICK" ] && TOOLS=""
for tool in $TOOLS; do
    (
        step "sanitizer $tool parity" 170 "$OUT/san_$tool.txt" compute-sanitizer --tool $tool "$S" parity --backend cuda
        step "sanitizer $tool generate" 50 "$OUT/san_$tool.txt" compute-sanitizer --tool $tool "$S" generate --backend cuda --max-new-tokens 8
    ) &
    SANS+=($!)
done
step "parity cuda" 120 "$OUT/parity.txt" "$S" parity --backend cuda
grep -E "^cuda: " "$OUT/parity.txt" | tail -1 >> "$SUM"
source .device-vk/env.sh
step "parity wgpu" 150 "$OUT/parity.txt" "$S" parity --backend wgpu
grep -E "^wgpu: " "$OUT/parity.txt" | tail -1 >> "$SUM"
for be in cuda wgpu; do
    for fx in tiny-dense tiny-moe; do
        "$S" generate --model tests/fixtures/$fx --backend $be --prompt-ids 2,17,99,5,250,31 \
            --max-new-tokens 10 --ignore-eos --json > /tmp/$fx.$be.json 2>>"$OUT/model.txt"
        python3 scripts/compare_fixture.py tests/fixtures/$fx/expected.json /tmp/$fx.$be.json "$fx on $be vs HF" | tail -1 | tee -a "$SUM" >> "$OUT/model.txt"
    done
done
[ ${#SANS[@]} -gt 0 ] && wait "${SANS[@]}"
for tool in $TOOLS; do
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/san_$tool.txt" | sed "s/^/  $tool: /" >> "$SUM"
    cat "$OUT/san_$tool.txt" >> "$OUT/sanitizers.txt" && rm "$OUT/san_$tool.txt"
done

# Timing: one thing at a time on the GPU.
step "bench cuda" 100 "$OUT/bench_cuda.md" "$S" bench --backend cuda --iters 10 --json
if [ -n "$BEFORE" ]; then
    step "bench cuda (before)" 100 "$OUT/bench_cuda_before.md" "$BEFORE" bench --backend cuda --iters 10 --json
    python3 scripts/bench_compare.py "$OUT/bench_cuda_before.md" "$OUT/bench_cuda.md" > "$OUT/before_after_cuda.md" 2>&1
    tail -4 "$OUT/before_after_cuda.md" >> "$SUM"
fi
step "bench-model cuda" 60 "$OUT/bench_model.md" "$S" bench-model --backend cuda --steps 32
[ -n "$BEFORE" ] && step "bench-model cuda (before)" 60 "$OUT/bench_model_before.md" "$BEFORE" bench-model --backend cuda --steps 32
step "bench wgpu" 100 "$OUT/bench_wgpu.md" "$S" bench --backend wgpu --iters 5 --json
if [ -n "$BEFORE" ]; then
    step "bench wgpu (before)" 100 "$OUT/bench_wgpu_before.md" "$BEFORE" bench --backend wgpu --iters 5 --json
    python3 scripts/bench_compare.py "$OUT/bench_wgpu_before.md" "$OUT/bench_wgpu.md" > "$OUT/before_after_wgpu.md" 2>&1
    tail -4 "$OUT/before_after_wgpu.md" >> "$SUM"
fi
[ -z "$QUICK" ] && step "hf decode (eager)" 90 "$OUT/bench_model.md" python3 scripts/hf_decode_bench.py --modes eager --steps 32 --repeats 2
step "bench-model wgpu" 60 "$OUT/bench_model.md" "$S" bench-model --backend wgpu --steps 16
cat "$SUM"
