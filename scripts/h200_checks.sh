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
#   prefill: issue 13 item 6, end to end: for each of SHAPES, bench-model
#            --backend cuda --prefill-len PREFILL_LEN (one pass of the
#            prompt, 2 warm-up passes naming the kernel entries it runs, 5
#            timed; batch 1 decode kept short), then HF transformers'
#            prefill of the same prompt length (hf_decode_bench.py
#            --prefill-len), eager on every shape first, then
#            torch.compile'd shape by shape, each compile given what the
#            deadline leaves (at most PREFILL_COMPILE_S; a failure or a
#            timeout is reported as such, a shape with too little time left
#            is skipped and the summary says so);
#            then the prefill table per shape (decode_tables.py --prefill)
#            in prefill_tables.md. Not in the default PARTS;
#   tensorcore: issue 13's kernels against their yardsticks, each in the
#            process that times the yardstick: dist/gemm_bench (dense bf16
#            and W4A16 at M >= 512 beside cuBLAS bf16), dist/attn_bench (flash
#            prefill at 4096 tokens) then backend-cuda/examples/attn_sdpa.py
#            (torch SDPA, flash backend and default dispatch), dist/attn_bench
#            --moe (grouped MoE GEMMs beside cuBLAS dense and per expert).
#            Needs the two examples in dist (cargo build --release -p
#            switchyard-cuda --example gemm_bench --example attn_bench; copy
#            target/release/examples/{gemm_bench,attn_bench}). Not in the
#            default PARTS;
#   profile: Nsight Compute over the timed decode steps of bench-model
#            (each shape at batch 1, the default shape at batch 16 too),
#            summarised per kernel by scripts/ncu_summary.py;
#   deep:    Nsight Compute's detailed sections (speed of light, memory,
#            occupancy, warp stalls) over the first DEEP_COUNT launches of
#            the kernels matching DEEP_KERNELS in one default-shape decode
#            step (DEEP_ARGS adds bench-model options, e.g. --quant nvfp4).
#            Not in the default PARTS;
#   tp:      for the two-GPU machine (device kind nvidia-h200-x2): the
#            tensor_parallel test binary (cuda --tp 2 vs --tp 1 on every
#            fixture over NCCL, with SWITCHYARD_REQUIRE_CUDA_TP2=1 so a
#            missing GPU or libnccl fails it), then bench-model --tp 1 and
#            --tp 2 on the TP_SHAPES at batch 1 and 16, the scaling and the
#            all-reduce time per token in tp_scaling.md. NCCL_NVLS_ENABLE=0;
#            libnccl is looked for in the system, then in python's
#            site-packages (torch's nvidia nccl wheel), and linked as
#            libnccl.so on LD_LIBRARY_PATH. Not in the default PARTS;
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
#        (and for the model tests on every backend: the same with -p switchyard-tests --test model_fixtures,
#        into dist/model_fixtures)
# There: bash scripts/h200_checks.sh     (carry dist and .device-vk; writes to $OUT)
# The tp part needs dist/tensor_parallel: cp "$(cargo test --release -p switchyard-tests
#        --test tensor_parallel --no-run 2>&1 | grep -o 'target/release/deps/tensor_parallel-[0-9a-f]*')"
#        dist/tensor_parallel && strip dist/tensor_parallel; run PARTS=tp on an nvidia-h200-x2 machine.
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
#   TP_SHAPES="31b 26b-a4b"        the bench-model shapes of the tp part
#   PREFILL_LEN=4096               the prompt length of the prefill part
#   PREFILL_COMPILE_S=150          the most seconds HF's compiling prefill call may take
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
[ -f .device-vk/env.sh ] && source .device-vk/env.sh

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
    # The model tests on every backend (HF fixtures, batched against alone,
    # both orders of the MoE layer), reading the fixtures from this checkout.
    if [ -x dist/model_fixtures ]; then
        step "model_fixtures" 200 "$OUT/model_fixtures.txt" env SWITCHYARD_SOURCE_ROOT="$PWD" SWITCHYARD_REQUIRE_CUDA=1 \
            SWITCHYARD_REQUIRE_WGPU=1 dist/model_fixtures --test-threads 1
        grep -E "^test result|panicked" "$OUT/model_fixtures.txt" >> "$SUM"
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
        # 160 s: every case now runs 200 ms of launches before it is timed.
        step "bench $be" 160 "$OUT/bench_$be.md" "$S" bench --backend $be --iters $iters --json
        if [ "$be" = wgpu ]; then
            # What limits the bf16 embed, head and argmax rows: zero against random
            # tables, one window against two, the two dispatches with no data (cli/src/bench/cases.rs).
            SWITCHYARD_BENCH_GATHER_DIAG=only step "bench wgpu gather diag" 90 "$OUT/bench_wgpu_gather_diag.md" "$S" bench --backend wgpu --iters 5 --filter embed_gather_bf16
            SWITCHYARD_BENCH_HEAD_DIAG=1 step "bench wgpu head diag" 60 "$OUT/bench_wgpu_head_diag.md" "$S" bench --backend wgpu --iters 5 --filter lm_head_logits
            SWITCHYARD_BENCH_HEAD_DIAG=1 SWITCHYARD_WGSL_HEAD_HALVES=1 step "bench wgpu head diag, fitting tables as two windows" 60 "$OUT/bench_wgpu_head_halves.md" "$S" bench --backend wgpu --iters 5 --filter lm_head_logits_bf16
            SWITCHYARD_BENCH_ARGMAX_DIAG=1 step "bench wgpu argmax diag" 40 "$OUT/bench_wgpu_argmax_diag.md" "$S" bench --backend wgpu --iters 5 --filter argmax_rows
        fi
        if [ -n "$BEFORE" ]; then
            step "bench $be (before)" 160 "$OUT/bench_${be}_before.md" "$BEFORE" bench --backend $be --iters $iters --json
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
        # --profile-timed-steps: one more step timed dispatch by dispatch (GPU time per kernel, outside the timed figures).
        jstep "bench-model wgpu $shape" 150 "$DEC/bm_wgpu_$shape.json" "$S" bench-model --backend wgpu --shape $shape --steps 8 --profile-timed-steps --json
        python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
for r in d["rows"]:
    p = r.get("gpu_profile")
    if not p: continue
    print("wgpu %s b%d: one step %.0f us of GPU time (%.0f us wall a step untimed); top kernels:" % (d["shape"], r["batch"], p["total_us"], 1e3 * r["step_ms_median"]))
    for e in p["entries"][:10]: print("  %-40s x%-3d %8.1f us  %4.1f%%" % (e["entry"], e["dispatches"], e["us"], 100 * e["us"] / p["total_us"]))' \
            "$DEC/bm_wgpu_$shape.json" >> "$SUM" 2>&1
    done
    if [ -z "$QUICK" ] && has_mode compile; then
        # One step per batch size: a compile that runs long at batch 16 (past
        # 200 s in the fourth session's final call) keeps the batch-1 figure.
        for shape in $SHAPES; do
            for b in 1 16; do
                step "hf decode compile $shape b$b" 200 "$DEC/decode.log" python3 scripts/hf_decode_bench.py --shape $shape \
                    --batch $b --modes compile --steps 32 --repeats 2 --out "$DEC/hf_decode.jsonl"
            done
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

PREFILL_LEN=${PREFILL_LEN:-4096}
PREFILL_COMPILE_S=${PREFILL_COMPILE_S:-150}
prefill() { # in order of priority: Switchyard (seconds a shape), HF eager, HF compile
    local PRE=$OUT/prefill shape ct overhead=45
    mkdir -p "$PRE"
    for shape in $SHAPES; do
        step "bench-model cuda $shape --prefill-len $PREFILL_LEN" 120 "$PRE/prefill.log" bash -c '"$@" > "$0"' "$PRE/bm_$shape.json" \
            "$S" bench-model --backend cuda --shape "$shape" --prefill-len "$PREFILL_LEN" --batch 1 --steps 8 --json
        python3 -c 'import json,sys; p=json.load(open(sys.argv[1]))["prefill"]; print("switchyard %s prefill %d: %.0f tok/s, %.1f ms, %.1f TFLOP/s, %d launches, same token %s" % (sys.argv[2], p["prompt_len"], p["tokens_per_s"], p["ms_median"], p["tflops_per_s"], sum(x["count"] for x in p["launches"]), p["same_token"]))' \
            "$PRE/bm_$shape.json" "$shape" >> "$SUM" 2>&1
    done
    for shape in $SHAPES; do
        step "hf prefill eager $shape" 90 "$PRE/prefill.log" python3 scripts/hf_decode_bench.py \
            --shape "$shape" --prefill-len "$PREFILL_LEN" --modes eager --repeats 3 --out "$PRE/hf_prefill.jsonl"
    done
    for shape in $SHAPES; do
        # HF's import, model build, and the compiled warm-up and timed runs
        # take about $overhead s besides the compile itself, which gets the rest.
        ct=$((DEADLINE - SECONDS - overhead - 10))
        [ "$ct" -gt "$PREFILL_COMPILE_S" ] && ct=$PREFILL_COMPILE_S
        if [ "$ct" -lt 30 ]; then
            echo "hf prefill compile $shape: not run ($((DEADLINE - SECONDS)) s left before DEADLINE=$DEADLINE)" | tee -a "$SUM"
            continue
        fi
        step "hf prefill compile $shape (compile limit $ct s)" $((ct + overhead)) "$PRE/prefill.log" python3 scripts/hf_decode_bench.py \
            --shape "$shape" --prefill-len "$PREFILL_LEN" --modes compile --repeats 3 --compile-timeout "$ct" --out "$PRE/hf_prefill.jsonl"
    done
    for shape in $SHAPES; do
        local args=(--prefill --shape "$shape")
        [ -s "$PRE/bm_$shape.json" ] && args+=(--cuda "$PRE/bm_$shape.json")
        [ -s "$PRE/hf_prefill.jsonl" ] && args+=(--hf "$PRE/hf_prefill.jsonl")
        { echo "### \`$shape\`: prefill of $PREFILL_LEN tokens"; echo; python3 scripts/decode_tables.py "${args[@]}" 2>&1; echo; } >> "$OUT/prefill_tables.md"
    done
    cat "$OUT/prefill_tables.md" >> "$SUM"
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

tp() { # two GPUs: the cuda tp parity test, then bench-model --tp 1 / --tp 2 per shape at batch 1 and 16
    local TPD=$OUT/tp shape t lib dir
    mkdir -p "$TPD"
    export NCCL_NVLS_ENABLE=0
    nvidia-smi topo -m > "$TPD/topo.txt" 2>&1
    # cudarc opens libnccl.so (or .so.<CUDA major>); a pip wheel ships libnccl.so.2 only.
    if ! ldconfig -p 2>/dev/null | grep -q 'libnccl\.so '; then
        lib=$(find $(python3 -c 'import site; print(*site.getsitepackages())' 2>/dev/null) /opt/torch/.venv \
            -name 'libnccl.so*' 2>/dev/null | head -1)
        if [ -n "$lib" ]; then
            dir=/tmp/switchyard-nccl
            mkdir -p "$dir" && ln -sf "$lib" "$dir/libnccl.so"
            export LD_LIBRARY_PATH=$dir:$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        fi
        echo "libnccl: ${lib:-not found}" | tee -a "$SUM"
    fi
    step "tensor_parallel test (cuda --tp 2 vs --tp 1)" 240 "$TPD/tensor_parallel.txt" \
        env SWITCHYARD_REQUIRE_CUDA_TP2=1 dist/tensor_parallel --nocapture --test-threads 1
    grep -E "^test result|on cuda \(NCCL\)|FAILED|panicked" "$TPD/tensor_parallel.txt" >> "$SUM"
    for shape in $TP_SHAPES; do
        for t in 1 2; do
            step "bench-model cuda $shape --tp $t" 150 "$TPD/tp.log" bash -c '"$@" > "$0"' "$TPD/bm_${shape}_tp$t.json" \
                "$S" bench-model --backend cuda --shape "$shape" --tp $t --batch 1,16 --steps 32 --json
        done
    done
    python3 - "$TPD" $TP_SHAPES > "$OUT/tp_scaling.md" 2>&1 <<'PY'
import json, os, sys
d, shapes = sys.argv[1], sys.argv[2:]
f = lambda x, fmt: fmt % x if x is not None else "-"
print("| shape | batch | tp 1 tok/s | tp 2 tok/s | scaling | tp 2 % of bound | all-reduce us/token | all-reduce % of step | calls/step |")
print("|---|---|---|---|---|---|---|---|---|")
for shape in shapes:
    runs = {}
    for t in (1, 2):
        p = os.path.join(d, f"bm_{shape}_tp{t}.json")
        try:
            runs[t] = {r["batch"]: r for r in json.load(open(p))["rows"]}
        except Exception as e:
            runs[t] = {}
            print(f"| {shape} | - | {os.path.basename(p)}: {e} | | | | | | |")
    for b in sorted(set(runs[1]) | set(runs[2])):
        r1, r2 = runs[1].get(b), runs[2].get(b)
        a = (r2 or {}).get("all_reduce") or {}
        t1, t2 = r1 and r1["tokens_per_s"], r2 and r2["tokens_per_s"]
        share = a.get("fraction_of_step")
        print(f"| {shape} | {b} | {f(t1, '%.1f')} | {f(t2, '%.1f')} | {f(t1 and t2 and t2 / t1, '%.2fx')} | "
              f"{f(r2 and 100 * r2['fraction_of_bound'], '%.0f%%')} | {f(a.get('us_per_token'), '%.1f')} | "
              f"{f(share and 100 * share, '%.1f%%')} | {a.get('calls_per_step', '-')} |")
print("\nTarget (issue 17): tp 2 >= 1.60x tp 1 tok/s at batch 1 on 31b. All-reduce: the step's NCCL bf16 sums, timed on each "
      "GPU after the decode steps (recorded and replayed as the step is), the slowest rank's.")
PY
    cat "$OUT/tp_scaling.md" >> "$SUM"
}
TP_SHAPES=${TP_SHAPES:-31b 26b-a4b}

tensorcore() { # issue 13: the yardstick is timed in the same process (cuBLAS) or right after (SDPA)
    local T=$OUT/tensorcore.txt b
    for b in gemm_bench attn_bench; do
        if [ ! -x "dist/$b" ]; then
            echo "tensorcore: dist/$b is missing (cargo build --release -p switchyard-cuda --example $b)" | tee -a "$SUM"
            return
        fi
    done
    step "gemm_bench (dense bf16, cuBLAS)" 90 "$T" dist/gemm_bench
    step "gemm_bench --w4a16-prefill (cuBLAS bf16)" 90 "$T" dist/gemm_bench --w4a16-prefill
    step "attn_bench (flash prefill)" 90 "$T" dist/attn_bench
    step "attn_sdpa.py (torch SDPA)" 60 "$T" python3 backend-cuda/examples/attn_sdpa.py
    step "attn_bench --moe (cuBLAS dense and per expert)" 60 "$T" dist/attn_bench --moe
    grep -aE "^== |^\| |SDPA|NMSE" "$T" >> "$SUM"
}

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
has tp && tp
has train && train
has checks && checks
has kernels && kernels
has decode && decode
has prefill && prefill
has tensorcore && tensorcore
[ -n "$TRAIN_PID" ] && wait "$TRAIN_PID" && tail -5 "$OUT/train.log" >> "$SUM"

# At most 8 files come back from the device.
if [ "$(find "$OUT" -type f | wc -l)" -gt 8 ]; then
    (cd "$OUT" && find . -type f ! -name summary.txt ! -name decode_tables.md ! -name prefill_tables.md ! -name raw.tar.gz -print0 |
        tar -czf raw.tar.gz --null -T - --remove-files) && echo "raw outputs packed into raw.tar.gz" >> "$SUM"
fi
cat "$SUM"
