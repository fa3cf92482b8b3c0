#!/usr/bin/env bash
# Lead's final call of the eighth session (budget-bound: about 300 s). Parity on cuda and wgpu (every
# case, replay identity); compute-sanitizer memcheck + racecheck over the CUDA families changed since
# the last sanitised build (w4a16 incl. the ping-pong entry, attention, moe) beside parity and the HF
# fixtures, before anything is timed; the HF fixtures on cuda and wgpu; then the timed parts: the W4A16
# prefill A/B (default vs SWITCHYARD_W4A16_PINGPONG=1, cuBLAS in each process, and ncu of both), issue 14's
# wgpu kernel rows (a process each), the norm2 helper's variants (part.sh), bench-model cuda and wgpu at batch 1.
set -u
export OUT=${OUT:-/tmp/h200}
mkdir -p "$OUT"
START=$SECONDS
X=$OUT/final.txt
source .device-vk/env.sh
export SWITCHYARD_REQUIRE_CUDA=1 SWITCHYARD_REQUIRE_WGPU=1 SWITCHYARD_CUDA_CACHE=/tmp/sy-cubins
D=./dist-final8
S=$D/switchyard
G=$D/gemm_bench
( cd $D && for f in *.xz; do xz -d -f "$f"; done; chmod +x switchyard gemm_bench )
t() { echo "-- $((SECONDS - START)) s" >> $X; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $X
# Compile every module once (fills the cubin cache) before the sanitizers and parity run side by side.
timeout 100 $S parity --backend cuda > $OUT/parity_cuda.txt 2>&1
echo "== parity cuda" >> $X; grep "passed\|FAIL" $OUT/parity_cuda.txt | tail -5 >> $X; t
san() { # tool filter env...
  local tool=$1 f=$2; shift 2
  env "$@" timeout 60 compute-sanitizer --tool $tool $S parity --backend cuda --filter $f >> $OUT/san_$tool.txt 2>&1
  echo "rc=$? ($tool $f $*)" >> $OUT/san_$tool.txt
}
for tool in memcheck racecheck; do
  ( san $tool w4a16_gemm_n128 SWITCHYARD_W4A16_PINGPONG=1; san $tool attention X=0; san $tool moe_ X=0 ) &
done
echo "== parity wgpu" >> $X; timeout 100 $S parity --backend wgpu > $OUT/parity_wgpu.txt 2>&1; grep "passed\|FAIL" $OUT/parity_wgpu.txt | tail -5 >> $X; t
echo "== parity cuda, ping-pong W4A16" >> $X; SWITCHYARD_W4A16_PINGPONG=1 timeout 20 $S parity --backend cuda --filter w4a16_gemm 2>&1 | grep "passed\|FAIL" | tail -3 >> $X
echo "== HF fixtures" >> $X
for be in cuda wgpu; do
  for fx in tiny-dense tiny-moe tiny-e2b tiny-e4b tiny-26b-a4b tiny-31b; do
    timeout 30 $S generate --model tests/fixtures/$fx --backend $be --prompt-ids 2,17,99,5,250,31 \
      --max-new-tokens 10 --ignore-eos --json > /tmp/$fx.$be.json 2>>$OUT/model_err.txt
    python3 scripts/compare_fixture.py tests/fixtures/$fx/expected.json /tmp/$fx.$be.json "$fx on $be vs HF" | tail -1 >> $X
  done
done; t
wait
echo "== sanitizers (w4a16 with the ping-pong entry, attention, moe)" >> $X
for tool in memcheck racecheck; do grep -E "^cuda: |SUMMARY|^rc=" $OUT/san_$tool.txt | sed "s/^/$tool: /" >> $X; done
grep -m 12 -E "Race reported|Error: |in function" $OUT/san_racecheck.txt >> $X; t
echo "== W4A16 prefill A/B: default vs SWITCHYARD_W4A16_PINGPONG=1 (cuBLAS in each process)" >> $X
w4() { # tag shape env...
  local tag=$1 shape=$2; shift 2
  env "$@" SWITCHYARD_BENCH_W4_SHAPE=$shape timeout 25 $G --w4a16-prefill 2>&1 | grep -E "^\| (512|4096) \| [0-9]+ \| [0-9]+ \| (w4a16|cuBLAS)|worst NMSE" | sed "s/^/$tag: /" >> $X
}
w4 default 4096x8192x8192 X=0; w4 pingpong 4096x8192x8192 SWITCHYARD_W4A16_PINGPONG=1
NCU="ncu --clock-control none --section SpeedOfLight --metrics smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio -k regex:w4a16_gemm_wgmma --launch-skip 3 --launch-count 1"
for v in X=0 SWITCHYARD_W4A16_PINGPONG=1; do
  env $v SWITCHYARD_BENCH_W4_SHAPE=4096x8192x8192 timeout 25 $NCU $G --w4a16-prefill > $OUT/ncu_w4.txt 2>&1
  grep -E "w4a16_gemm_wgmma|Duration|SM Frequency|Compute \(SM\) Throughput|stalled" $OUT/ncu_w4.txt | sed "s/^/ncu $v: /" >> $X
done; t
echo "== issue 14 item 2 rows (wgpu, GPU time by timestamp queries; a process each)" >> $X
# (qkv_prep, the norms and the fp8 embed: their defaults run in the norm2 and fp8embed parts below)
for f in gather_rows embed_gather_bf16 argmax_rows lm_head_logits; do
  timeout 30 $S bench --backend wgpu --iters 5 --filter $f >> $OUT/bench_wgpu.txt 2>&1
done
grep -E "copy|^\| " $OUT/bench_wgpu.txt | grep -v "^| kernel\|^|---" >> $X; t
if [ -x benchmarks/2026-12-02-wgpu-norm2-h200/part.sh ] || [ -f benchmarks/2026-12-02-wgpu-norm2-h200/part.sh ]; then
  echo "== norm2 part" >> $X
  mkdir -p $OUT/norm2
  BIN=$S PART_OUT=$OUT/norm2 timeout 70 bash benchmarks/2026-12-02-wgpu-norm2-h200/part.sh > $OUT/norm2/log.txt 2>&1
  echo "rc=$?" >> $X; tail -40 $OUT/norm2/log.txt >> $X; t
fi
for part in wgpu-fp8embed; do
  P=benchmarks/2026-12-02-$part-h200/part.sh
  [ -f $P ] || continue
  echo "== $part part" >> $X
  mkdir -p $OUT/$part
  BIN=$S PART_OUT=$OUT/$part timeout 45 bash $P > $OUT/$part/log.txt 2>&1
  echo "rc=$?" >> $X; tail -30 $OUT/$part/log.txt >> $X; t
done
echo "== bench-model" >> $X
bm() { local tag=$1; shift; timeout 45 $S bench-model "$@" 2>&1 | grep "^| [0-9]" | sed "s/^/$tag /" >> $X; }
bm "cuda default" --backend cuda --batch 1 --steps 32
bm "wgpu default" --backend wgpu --batch 1 --steps 16
t
# At most 8 files come back from the device: everything but final.txt in one archive.
( cd $OUT && tar czf /tmp/raw.tgz --exclude final.txt . && find . -mindepth 1 ! -name final.txt -delete && mv /tmp/raw.tgz raw.tgz )
cat $X
