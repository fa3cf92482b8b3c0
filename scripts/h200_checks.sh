#!/usr/bin/env bash
# Every GPU check and benchmark of the project, in parts:
#   checks:  parity on cuda and wgpu, compute-sanitizer (memcheck, racecheck,
#            initcheck) over `parity` and `generate` on cuda, the HF fixtures
#            on cuda and wgpu;
#   kernels: the kernel bench on cuda and wgpu;
#   decode:  for each bench-model shape (default, 26b-a4b): bench-model on
#            cuda and wgpu at batch 1 and 16, HF transformers' decode bench
#            (scripts/hf_decode_bench.py) eager and torch.compile, the default
#            shape with --quant nvfp4 on cuda, then the
#            BENCHMARKS.md table per shape (scripts/decode_tables.py);
#   profile: Nsight Compute over the timed decode steps of bench-model
#            (each shape at batch 1, the default shape at batch 16 too),
#            summarised per kernel by scripts/ncu_summary.py;
#   deep:    Nsight Compute's detailed sections (speed of light, memory,
#            occupancy, warp stalls) over the first DEEP_COUNT launches of
#            the kernels matching DEEP_KERNELS in one default-shape decode
#            step (DEEP_ARGS adds bench-model options, e.g. --quant nvfp4).
#            Not in the default PARTS;
#   train:   trains the built-in model (scripts/train_default_model.py
#            --device cuda) in the background while the parts after it run
#            (so put it before `checks`, whose figures are not timed), and
#            packs it into $OUT/default-model.tar.gz. Not in the default PARTS.
#
# Here:  cargo build --release -p switchyard-cli && mkdir -p dist &&
#        cp target/release/switchyard dist/ && strip dist/switchyard &&
#        bash scripts/prepare-vulkan.sh .device-vk
#        (and for the split-table check: cp "$(cargo test --release -p switchyard-wgpu
#        --test split_tables --no-run 2>&1 | grep -o 'target/release/deps/split_tables-[0-9a-f]*')" dist/split_tables)
# There: bash scripts/h200_checks.sh     (carry dist and .device-vk; writes to $OUT)
#
# A device call runs 10 minutes at most, and the three parts together take
# longer: run PARTS="checks kernels" in one call and PARTS=decode in another.
# Each step has its own time limit, and none runs past DEADLINE seconds after
# the start (default 570): a step that would is skipped and the summary says
# so, so the steps that did run still come back. Decode steps run in order of
# priority (Switchyard cuda, HF eager, Switchyard wgpu, HF compile).
#
# Options (environment):
#   PARTS="checks kernels decode"  the parts to run (default: all three)
#   BEFORE=dist/switchyard-before  an older build whose kernel bench and
#                                  bench-model (default shape) run in the same
#                                  call, for a before/after table
#   QUICK=1                        skip the sanitizers and HF's decode bench
#   DEADLINE=570                   seconds after which no step starts
#   SANITIZERS="memcheck racecheck initcheck"  the compute-sanitizer tools of the checks part
#   SHAPES="default 26b-a4b"       the bench-model shapes of the decode and profile parts
#   TRAIN_MINUTES=4                the training time box of the train part
#   HF_MODES="eager compile"       HF's decode modes (compile is the peer)
#   BENCH_BACKENDS="cuda wgpu"     the kernel bench's backends (cuda first)
# The device hands back at most 8 files from $OUT: when there are more, all
# but summary.txt and decode_tables.md are packed into $OUT/raw.tar.gz.
set -u
S=${S:-./dist/switchyard}
BEFORE=${BEFORE:-}
QUICK=${QUICK:-}
PARTS=${PARTS:-checks kernels decode}
DEADLINE=${DEADLINE:-570}
OUT=${OUT:-/tmp/h200}
mkdir -p "$OUT"
SUM=$OUT/summary.txt
export SWITCHYARD_REQUIRE_CUDA=1
export S PYTHONUNBUFFERED=1

# step NAME SECONDS FILE COMMAND...: appends the command's output (stdout and
# stderr) to FILE under a header, within its time limit and the deadline.
step() {
    local name=$1 secs=$2 file=$3; shift 3
    local left=$((DEADLINE - SECONDS))
    if [ "$left" -lt 10 ]; then
        echo "$name: skipped (past DEADLINE=$DEADLINE s)" | tee -a "$SUM"
        return
    fi
    [ "$secs" -gt "$left" ] && secs=$left
    local t0=$SECONDS
    echo "== $name" >> "$file"
    timeout "$secs" "$@" >> "$file" 2>&1
    local rc=$?
    echo "$name: rc=$rc ($((SECONDS - t0)) s)" | tee -a "$SUM"
}

# jstep NAME SECONDS JSON COMMAND...: like step, but the command's stdout
# alone goes to JSON (its stderr to the decode log).
jstep() {
    local name=$1 secs=$2 json=$3; shift 3
    step "$name" "$secs" "$DEC/decode.log" bash -c '"$@" > "$0"' "$json" "$@"
}

has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
has_mode() { case " $HF_MODES " in *" $1 "*) return 0 ;; esac; return 1; }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$SUM"
# The Vulkan loader and NVIDIA's ICD for wgpu (harmless for CUDA).
source .device-vk/env.sh

checks() { # correctness (not timed); the three sanitizers run meanwhile, side by side
    local SANS=() TOOLS=${SANITIZERS-memcheck racecheck initcheck} tool be fx
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
    step "parity wgpu" 150 "$OUT/parity.txt" "$S" parity --backend wgpu
    grep -E "^wgpu: " "$OUT/parity.txt" | tail -1 >> "$SUM"
    # Tables past one binding under Vulkan: the 31B-shaped bf16 table (2.8 GB) in two windows.
    if [ -x dist/split_tables ]; then
        step "split tables wgpu" 150 "$OUT/split_tables.txt" env SWITCHYARD_REQUIRE_WGPU=1 dist/split_tables --nocapture --test-threads 1
        grep -E "binding limit|^test result" "$OUT/split_tables.txt" >> "$SUM"
    fi
    for be in cuda wgpu; do
        for fx in tiny-dense tiny-moe tiny-e2b tiny-e4b tiny-26b-a4b tiny-31b; do
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
}

kernels() { # one thing at a time on the GPU, each backend of BENCH_BACKENDS
    local be iters
    for be in ${BENCH_BACKENDS-cuda wgpu}; do
        iters=10
        [ "$be" = wgpu ] && iters=5
        step "bench $be" 100 "$OUT/bench_$be.md" "$S" bench --backend $be --iters $iters --json
        if [ -n "$BEFORE" ]; then
            step "bench $be (before)" 100 "$OUT/bench_${be}_before.md" "$BEFORE" bench --backend $be --iters $iters --json
            python3 scripts/bench_compare.py "$OUT/bench_${be}_before.md" "$OUT/bench_$be.md" > "$OUT/before_after_$be.md" 2>&1
            tail -4 "$OUT/before_after_$be.md" >> "$SUM"
        fi
    done
}

SHAPES=${SHAPES:-default 26b-a4b}
HF_MODES=${HF_MODES-eager compile}
DEC=$OUT/decode
decode() { # both shapes, in order of priority; wgpu decodes ~4 tok/s, so fewer steps
    mkdir -p "$DEC"
    local shape
    for shape in $SHAPES; do
        jstep "bench-model cuda $shape" 90 "$DEC/bm_cuda_$shape.json" "$S" bench-model --backend cuda --shape $shape --steps 32 --json
    done
    # The 4-bit model against the bf16 one (issue 12: >= 2.5x at batch 1).
    jstep "bench-model cuda default nvfp4" 90 "$DEC/bm_cuda_default_nvfp4.json" "$S" bench-model --backend cuda --quant nvfp4 --steps 32 --json
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); [print("nvfp4 default b%d: %.1f tok/s (%.0f%% of its bound), model %.2f GB" % (r["batch"], r["tokens_per_s"], 100 * r["fraction_of_bound"], d["model_bytes"] / 1e9)) for r in d["rows"]]' \
        "$DEC/bm_cuda_default_nvfp4.json" >> "$SUM" 2>&1
    [ -n "$BEFORE" ] && step "bench-model cuda default (before)" 60 "$DEC/bench_model_before.md" "$BEFORE" bench-model --backend cuda --steps 32
    if [ -z "$QUICK" ] && has_mode eager; then
        for shape in $SHAPES; do
            step "hf decode eager $shape" 150 "$DEC/decode.log" python3 scripts/hf_decode_bench.py --shape $shape \
                --modes eager --steps 32 --repeats 2 --out "$DEC/hf_decode.jsonl"
        done
    fi
    for shape in $SHAPES; do
        jstep "bench-model wgpu $shape" 150 "$DEC/bm_wgpu_$shape.json" "$S" bench-model --backend wgpu --shape $shape --steps 8 --json
    done
    if [ -z "$QUICK" ] && has_mode compile; then
        for shape in $SHAPES; do
            step "hf decode compile $shape" 200 "$DEC/decode.log" python3 scripts/hf_decode_bench.py --shape $shape \
                --modes compile --steps 32 --repeats 2 --out "$DEC/hf_decode.jsonl"
        done
    fi
    for shape in $SHAPES; do
        local args=(--shape "$shape")
        [ -s "$DEC/bm_cuda_$shape.json" ] && args+=(--cuda "$DEC/bm_cuda_$shape.json")
        [ -s "$DEC/bm_wgpu_$shape.json" ] && args+=(--wgpu "$DEC/bm_wgpu_$shape.json")
        [ -s "$DEC/hf_decode.jsonl" ] && args+=(--hf "$DEC/hf_decode.jsonl")
        { echo "### \`$shape\`"; echo; python3 scripts/decode_tables.py "${args[@]}" 2>&1; echo; } >> "$OUT/decode_tables.md"
    done
    cat "$OUT/decode_tables.md" >> "$SUM"
}

profile() { # serialised per-kernel times: not a throughput figure, a map of where a step goes
    local shape b copy
    for shape in $SHAPES; do
        for b in 1 16; do
            [ "$b" = 16 ] && [ "$shape" != default ] && continue
            copy=$("$S" bench-model --backend cuda --shape $shape --batch $b --steps 4 --json 2>/dev/null |
                python3 -c 'import json,sys; print(round(json.load(sys.stdin)["copy_gb_per_s"]))' 2>/dev/null)
            step "ncu $shape b$b" 150 "$OUT/ncu_$shape.b$b.csv" ncu --clock-control none --profile-from-start off \
                --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --csv --page raw \
                "$S" bench-model --backend cuda --shape $shape --batch $b --steps 2 --profile-timed-steps
            { echo "### ncu: $shape, batch $b (copy ${copy:-?} GB/s)"; echo
              python3 scripts/ncu_summary.py "$OUT/ncu_$shape.b$b.csv" --steps 2 ${copy:+--copy-gbs $copy} 2>&1; echo; } >> "$OUT/profile.md"
        done
    done
    cat "$OUT/profile.md" >> "$SUM"
}

deep() { # ncu's detailed sections over the first launches of the decode kernels furthest below the copy ceiling
    step "ncu deep default b1" 240 "$OUT/ncu_deep.txt" ncu --clock-control none --profile-from-start off \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
        --section WarpStateStats --section SchedulerStats -k "$DEEP_KERNELS" --launch-count "$DEEP_COUNT" \
        "$S" bench-model --backend cuda --shape default --batch 1 --steps 1 --profile-timed-steps $DEEP_ARGS
}
DEEP_KERNELS=${DEEP_KERNELS:-regex:dense_gemv|attention_decode|post_norm|layer_out|qkv_prep}
DEEP_COUNT=${DEEP_COUNT:-12}
DEEP_ARGS=${DEEP_ARGS:-}

TRAIN_PID=
train() { # in the background; waited for at the end
    (
        step "train default model" $((TRAIN_MINUTES * 60 + 150)) "$OUT/train.log" python3 scripts/train_default_model.py \
            --out /tmp/default-model --device cuda --minutes "$TRAIN_MINUTES" --log-every 20
        tar -czf "$OUT/default-model.tar.gz" -C /tmp default-model && echo "default model packed" >> "$SUM"
    ) &
    TRAIN_PID=$!
}
TRAIN_MINUTES=${TRAIN_MINUTES:-4}

has profile && profile
has deep && deep
has train && train
has checks && checks
has kernels && kernels
has decode && decode
[ -n "$TRAIN_PID" ] && wait "$TRAIN_PID" && tail -5 "$OUT/train.log" >> "$SUM"

# At most 8 files come back from the device.
if [ "$(find "$OUT" -type f | wc -l)" -gt 8 ]; then
    (cd "$OUT" && find . -type f ! -name summary.txt ! -name decode_tables.md ! -name raw.tar.gz -print0 |
        tar -czf raw.tar.gz --null -T - --remove-files) && echo "raw outputs packed into raw.tar.gz" >> "$SUM"
fi
cat "$SUM"
