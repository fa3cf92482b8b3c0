#!/usr/bin/env bash
# Lead's final call of the fifth session (cut to what 421 s of device time allows after two
# refused starts): parity on cuda (every case) and wgpu, compute-sanitizer memcheck + racecheck
# over the kernels changed this session, bench-model default at batch 1 / 16 with PDL on (the new
# default) and off, wgpu batch 1, 26b-a4b and nvfp4 at batch 1. Everything into one file.
set -u
export OUT=${OUT:-/tmp/h200}
mkdir -p "$OUT"
START=$SECONDS
X=$OUT/final.txt
source .device-vk/env.sh
export SWITCHYARD_REQUIRE_CUDA=1 SWITCHYARD_REQUIRE_WGPU=1
S=./dist/switchyard
t() { echo "-- $((SECONDS - START)) s" >> $X; }
$S info --backend cuda 2>&1 | grep -iE "cluster|cuda arch|programmatic|device" >> $X
echo "== parity cuda" >> $X; timeout 120 $S parity --backend cuda > $OUT/parity_cuda.txt 2>&1; grep "passed\|FAIL" $OUT/parity_cuda.txt | tail -5 >> $X; t
echo "== parity wgpu" >> $X; timeout 150 $S parity --backend wgpu > $OUT/parity_wgpu.txt 2>&1; grep "passed\|FAIL" $OUT/parity_wgpu.txt | tail -5 >> $X; t
for tool in memcheck racecheck; do
  echo "== $tool: attention_prefill, gelu_mul (the kernels not yet sanitized)" >> $X
  for f in attention_prefill gelu_mul; do
    timeout 50 compute-sanitizer --tool $tool $S parity --backend cuda --filter $f 2>&1 | grep -E "ERROR SUMMARY|hazard|passed" | sed "s/^/$f: /" >> $X
  done; t
done
echo "== bench-model cuda default b1: PDL on (default), off" >> $X
for v in 1 0; do SWITCHYARD_CUDA_PDL=$v timeout 40 $S bench-model --backend cuda --batch 1 --steps 32 2>&1 | grep "^| [0-9]" >> $X; done; t
echo "== bench-model cuda default b16: PDL on, off" >> $X
for v in 1 0; do SWITCHYARD_CUDA_PDL=$v timeout 40 $S bench-model --backend cuda --batch 16 --steps 16 2>&1 | grep "^| [0-9]" >> $X; done; t
echo "== bench-model wgpu default b1" >> $X
timeout 45 $S bench-model --backend wgpu --batch 1 --steps 16 2>&1 | grep "^| [0-9]" >> $X; t
echo "== cuda 26b-a4b b1" >> $X
timeout 45 $S bench-model --backend cuda --shape 26b-a4b --batch 1 --steps 32 2>&1 | grep "^| [0-9]" >> $X; t
echo "== cuda nvfp4 b1" >> $X
timeout 45 $S bench-model --backend cuda --quant nvfp4 --batch 1 --steps 32 2>&1 | grep "^| [0-9]" >> $X; t
cat $X
