#!/usr/bin/env bash
# Final call of the tenth session (budget-bound: about 350 s). Correctness first:
# parity on cuda and wgpu (every case, replay identity), compute-sanitizer memcheck +
# racecheck over the CUDA family changed this session (gemv: the sandwich GEMV, the
# m >= 2 GEMVs, the q/k/v GEMV with qkv_prep in its epilogue), the HF fixtures on cuda
# and wgpu. Then bench-model: cuda batch 1 and 16, wgpu batch 1, 26b-a4b batch 1.
set -u
export OUT=${OUT:-/tmp/h200}
mkdir -p "$OUT"
START=$SECONDS
X=$OUT/final.txt
source .device-vk/env.sh
export SWITCHYARD_REQUIRE_CUDA=1 SWITCHYARD_REQUIRE_WGPU=1 SWITCHYARD_CUDA_CACHE=/tmp/sy-cubins
D=./dist-final10
S=$D/switchyard
t() { echo "-- $((SECONDS - START)) s" >> $X; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $X
timeout 110 $S parity --backend cuda > $OUT/parity_cuda.txt 2>&1
echo "== parity cuda" >> $X; grep "passed\|FAIL" $OUT/parity_cuda.txt | tail -5 >> $X; t
san() { # tool filter
  timeout 60 compute-sanitizer --tool $1 $S parity --backend cuda --filter $2 >> $OUT/san_$1.txt 2>&1
  echo "rc=$? ($1 $2)" >> $OUT/san_$1.txt
}
for tool in memcheck racecheck; do ( san $tool sandwich; san $tool layer_out_rmsnorm_qkv; san $tool dense_gemv_bf16; san $tool dense_gemv_gelu ) & done
echo "== parity wgpu" >> $X; timeout 120 $S parity --backend wgpu > $OUT/parity_wgpu.txt 2>&1; grep "passed\|FAIL" $OUT/parity_wgpu.txt | tail -5 >> $X; t
echo "== HF fixtures" >> $X
for be in cuda wgpu; do
  for fx in tiny-dense tiny-moe tiny-e2b tiny-e4b tiny-26b-a4b tiny-31b; do
    timeout 30 $S generate --model tests/fixtures/$fx --backend $be --prompt-ids 2,17,99,5,250,31 \
      --max-new-tokens 10 --ignore-eos --json > /tmp/$fx.$be.json 2>>$OUT/model_err.txt
    python3 scripts/compare_fixture.py tests/fixtures/$fx/expected.json /tmp/$fx.$be.json "$fx on $be vs HF" | tail -1 >> $X
  done
done; t
wait
echo "== sanitizers (sandwich, layer_out_rmsnorm_qkv, dense_gemv_bf16, dense_gemv_gelu)" >> $X
for tool in memcheck racecheck; do grep -E "^cuda: |SUMMARY|^rc=" $OUT/san_$tool.txt | sed "s/^/$tool: /" >> $X; done; t
bm() { local tag=$1; shift; timeout 45 $S bench-model "$@" 2>&1 | grep "^| [0-9]" | sed "s/^/$tag /" >> $X; }
echo "== bench-model" >> $X
bm "cuda default" --backend cuda --batch 1,16 --steps 32
bm "wgpu default" --backend wgpu --batch 1 --steps 16
bm "cuda default (again)" --backend cuda --batch 1,16 --steps 32
bm "cuda 26b-a4b" --backend cuda --shape 26b-a4b --batch 1,16 --steps 32; t
echo "== kernel rows: cuda dense_gemv (m >= 2 changes), wgpu layer_out (fitted slots)" >> $X
timeout 40 $S bench --backend cuda --iters 10 --filter dense_gemv > $OUT/bench_gemv.txt 2>&1
grep -E "copy ceiling|^\| dense_gemv" $OUT/bench_gemv.txt | cut -c1-200 >> $X
timeout 35 $S bench --backend wgpu --iters 5 --filter layer_out_bf16 > $OUT/bench_lo.txt 2>&1
grep -E "copy ceiling|^\| layer_out" $OUT/bench_lo.txt | cut -c1-220 >> $X; t
cd $OUT && tar czf raw.tgz bench_*.txt parity_*.txt san_*.txt model_err.txt 2>/dev/null && rm -f parity_*.txt san_*.txt bench_*.txt
