#!/usr/bin/env bash
# Sixteenth session, call a. NEW = Backend::enqueue_concurrent (CUDA: a side
# stream forked and joined, in the recorded graph too) and a MoE layer's
# dense MLP beside the routing and the experts. One binary: the A/B is
# SWITCHYARD_MOE_CONCURRENT=0 (the dense MLP in line, the sandwich fused
# into gate/up at batch 1: the previous graph) and
# SWITCHYARD_CUDA_BRANCH_PRIORITY=0 (both pieces at the default priority).
# There: carry dist-c1 and .device-vk; bash benchmarks/2026-12-03-sixteenth-a/run.sh
mkdir -p dist-new; xz -dc dist-c1/new.xz > dist-new/switchyard; xz -dc dist-c1/recording.xz > dist-new/recording; chmod +x dist-new/*
S=./dist-new/switchyard
source benchmarks/device_lib.sh
echo "== CUDA recording tests (the concurrent pieces)" >> $X
timeout 120 ./dist-new/recording --test-threads 1 > $OUT/recording.txt 2>&1; grep -E "^test |test result" $OUT/recording.txt >> $X; t
echo "== HF fixtures on cuda (tiny-moe and tiny-26b-a4b take the concurrent MoE layer)" >> $X
fixtures cuda; t
echo "== memcheck over generate tiny-26b-a4b on cuda" >> $X
timeout 120 compute-sanitizer --tool memcheck $S generate --model tests/fixtures/tiny-26b-a4b --backend cuda --prompt-ids 2,17,99,5,250,31 \
  --max-new-tokens 10 --ignore-eos > $OUT/memcheck_gen.txt 2>&1; grep -E "ERROR SUMMARY" $OUT/memcheck_gen.txt >> $X; t
echo "== 26b-a4b cuda: concurrent (default) / in line / concurrent without priorities, two rounds" >> $X
for round in 1 2; do
  bm "26b conc" $S bench-model --backend cuda --shape 26b-a4b --batch 1,16 --steps 32
  SWITCHYARD_MOE_CONCURRENT=0 bm "26b inline" $S bench-model --backend cuda --shape 26b-a4b --batch 1,16 --steps 32
  SWITCHYARD_CUDA_BRANCH_PRIORITY=0 bm "26b noprio" $S bench-model --backend cuda --shape 26b-a4b --batch 1,16 --steps 32
  t
done
echo "== parity cuda (replay identity; the launch path changed)" >> $X
timeout 120 $S parity --backend cuda > $OUT/parity_cuda.txt 2>&1; tail -2 $OUT/parity_cuda.txt | head -1 >> $X; t
cat $X
