#!/usr/bin/env bash
# Lead's final call of the seventh session: parity on cuda and wgpu (every case), compute-sanitizer
# memcheck + racecheck over every cuda parity case (run beside parity and the HF fixtures, before
# anything is timed), the HF fixtures on cuda and wgpu, then the issue-12 kernel rows
# (`switchyard bench`, copy ceiling of the same process) and bench-model (cuda default at batch 1
# and 16, wgpu default at batch 1, cuda 26b-a4b at 1 and 16, nvfp4 at 1). Everything into one file.
set -u
export OUT=${OUT:-/tmp/h200}
mkdir -p "$OUT"
START=$SECONDS
X=$OUT/final.txt
source .device-vk/env.sh
export SWITCHYARD_REQUIRE_CUDA=1 SWITCHYARD_REQUIRE_WGPU=1
S=./dist-final/switchyard
( cd dist-final && for f in *.xz; do xz -d "$f"; done; chmod +x * )
t() { echo "-- $((SECONDS - START)) s" >> $X; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $X
$S info --backend cuda 2>&1 | grep -iE "cluster|cuda arch|programmatic|device" >> $X
# Compile every module once before the sanitizers and parity run side by side.
timeout 120 $S parity --backend cuda > $OUT/parity_cuda.txt 2>&1
for tool in memcheck racecheck; do
  (timeout 230 compute-sanitizer --tool $tool $S parity --backend cuda > $OUT/san_$tool.txt 2>&1; echo "rc=$?" >> $OUT/san_$tool.txt) &
done
echo "== parity cuda" >> $X; grep "passed\|FAIL" $OUT/parity_cuda.txt | tail -5 >> $X; t
echo "== parity wgpu" >> $X; timeout 150 $S parity --backend wgpu > $OUT/parity_wgpu.txt 2>&1; grep "passed\|FAIL" $OUT/parity_wgpu.txt | tail -5 >> $X; t
echo "== HF fixtures" >> $X
for be in cuda wgpu; do
  for fx in tiny-dense tiny-moe tiny-e2b tiny-e4b tiny-26b-a4b tiny-31b; do
    timeout 60 $S generate --model tests/fixtures/$fx --backend $be --prompt-ids 2,17,99,5,250,31 \
      --max-new-tokens 10 --ignore-eos --json > /tmp/$fx.$be.json 2>>$OUT/model_err.txt
    python3 scripts/compare_fixture.py tests/fixtures/$fx/expected.json /tmp/$fx.$be.json "$fx on $be vs HF" | tail -1 >> $X
  done
done; t
wait
echo "== sanitizers over every cuda parity case" >> $X
for tool in memcheck racecheck; do grep -E "^cuda: |SUMMARY|^rc=" $OUT/san_$tool.txt | sed "s/^/$tool: /" >> $X; done
grep -m 12 -E "Race reported|Error: |in function|kernel" $OUT/san_racecheck.txt >> $X
echo "== decode attention rows (cuda)" >> $X
timeout 60 $S bench --backend cuda --iters 10 --filter attention_decode >> $OUT/bench_cuda.txt 2>&1
grep -E "copy|^\| " $OUT/bench_cuda.txt | grep -v "^| kernel\|^|---" >> $X; t
echo "== kernel rows of issue 14 item 2 (wgpu, GPU time by timestamp queries; a process each)" >> $X
for f in qkv_prep gather_rows embed_gather_bf16 embed_gather_fp8 argmax_rows lm_head_logits rmsnorm_bf16; do
  timeout 40 $S bench --backend wgpu --iters 5 --filter $f >> $OUT/bench_wgpu.txt 2>&1
done
grep -E "copy|^\| " $OUT/bench_wgpu.txt | grep -v "^| kernel\|^|---" >> $X; t
echo "== bench-model" >> $X
bm() { local tag=$1; shift; timeout 60 $S bench-model "$@" 2>&1 | grep "^| [0-9]" | sed "s/^/$tag /" >> $X; }
bm "cuda default" --backend cuda --batch 1 --steps 32
bm "cuda default" --backend cuda --batch 16 --steps 16
bm "wgpu default" --backend wgpu --batch 1 --steps 16
bm "cuda 26b-a4b" --backend cuda --shape 26b-a4b --batch 1 --steps 32
bm "cuda 26b-a4b" --backend cuda --shape 26b-a4b --batch 16 --steps 16
bm "cuda nvfp4" --backend cuda --quant nvfp4 --batch 1 --steps 32
bm "cuda default again" --backend cuda --batch 1 --steps 32
bm "wgpu default again" --backend wgpu --batch 1 --steps 16
t
echo "== W4A16 prefill at 512 x 5376 x 21504: split K (the plan's default there) and unsplit, cuBLAS in each process" >> $X
G=./dist-final/gemm_bench
for split in default 0 default; do
  if [ $split = 0 ]; then export SWITCHYARD_W4A16_SPLIT=0; fi
  SWITCHYARD_BENCH_W4_SHAPE=512x5376x21504 timeout 40 $G --w4a16-prefill 2>&1 | grep -v "^$" | tail -12 | sed "s/^/split=$split: /" >> $X
  unset SWITCHYARD_W4A16_SPLIT
done; t
cat $X
