#!/usr/bin/env bash
# Sixteenth session, call e: the final build (HEAD 28653dd; kernels unchanged
# since the fifteenth session, the CUDA launch path and the MoE layer's
# order changed). Correctness on both backends, then the decode rows.
# There: carry dist-c5 and .device-vk; bash benchmarks/2026-12-03-sixteenth-e/run.sh
mkdir -p dist-new; for b in switchyard recording model_fixtures; do xz -dc dist-c5/$b.xz > dist-new/$b; done; chmod +x dist-new/*
S=./dist-new/switchyard
source benchmarks/device_lib.sh
echo "== parity, cuda and wgpu (Vulkan)" >> $X
for be in cuda wgpu; do timeout 150 $S parity --backend $be > $OUT/parity_$be.txt 2>&1; tail -2 $OUT/parity_$be.txt | head -1 >> $X; done
grep -hE "\| fail" $OUT/parity_*.txt | head -5 >> $X; t
echo "== CUDA recording tests" >> $X
timeout 120 ./dist-new/recording --test-threads 1 > $OUT/recording.txt 2>&1; grep -E "^test |test result|panicked" $OUT/recording.txt >> $X; t
echo "== HF fixtures, cuda and wgpu (the CLI)" >> $X
fixtures; t
echo "== model_fixtures test binary (both MoE orders vs HF on every backend)" >> $X
[ -d /work/main/tests/fixtures ] || { mkdir -p /work 2>/dev/null; ln -sfn "$PWD" /work/main 2>/dev/null; }
timeout 200 ./dist-new/model_fixtures --test-threads 1 > $OUT/model_fixtures.txt 2>&1; grep -E "^test |test result|panicked|beside|in line" $OUT/model_fixtures.txt | cut -c1-170 >> $X; t
echo "== memcheck over generate tiny-26b-a4b on cuda" >> $X
timeout 120 compute-sanitizer --tool memcheck $S generate --model tests/fixtures/tiny-26b-a4b --backend cuda --prompt-ids 2,17,99,5,250,31 \
  --max-new-tokens 10 --ignore-eos > $OUT/memcheck_gen.txt 2>&1; grep -E "ERROR SUMMARY" $OUT/memcheck_gen.txt >> $X; t
echo "== bench-model" >> $X
for round in 1 2; do
  bm "cuda 26b" $S bench-model --backend cuda --shape 26b-a4b --batch 1,16 --steps 48
  SWITCHYARD_MOE_CONCURRENT=0 bm "cuda 26b inline" $S bench-model --backend cuda --shape 26b-a4b --batch 1,16 --steps 48
done
bm "cuda default" $S bench-model --backend cuda --batch 1,16 --steps 32
bm "wgpu 26b" $S bench-model --backend wgpu --shape 26b-a4b --batch 1,16 --steps 8
bm "wgpu default" $S bench-model --backend wgpu --batch 1,16 --steps 16; t
cat $X
