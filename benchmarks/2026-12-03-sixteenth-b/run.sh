#!/usr/bin/env bash
# Sixteenth session, call b. The concurrent MoE layer's variants in one
# binary (dist-c2): SWITCHYARD_MOE_CONCURRENT = mlp (default: the sandwich on
# its own, then gate/up and down beside the routing and experts) / down (the
# fused sandwich gate/up in line, then only down beside) / 0 (in line: the
# previous graph); SWITCHYARD_CUDA_BRANCH_PRIORITY = first (default) /
# second / 0; and PDL off for mlp and in line.
# There: carry dist-c2 and .device-vk; bash benchmarks/2026-12-03-sixteenth-b/run.sh
mkdir -p dist-new; xz -dc dist-c2/new.xz > dist-new/switchyard; xz -dc dist-c2/recording.xz > dist-new/recording; chmod +x dist-new/*
S=./dist-new/switchyard
source benchmarks/device_lib.sh
echo "== CUDA recording tests (the concurrent pieces)" >> $X
timeout 120 ./dist-new/recording --test-threads 1 > $OUT/recording.txt 2>&1; grep -E "^test |test result|panicked" $OUT/recording.txt >> $X; t
echo "== memcheck over generate tiny-26b-a4b on cuda" >> $X
timeout 120 compute-sanitizer --tool memcheck $S generate --model tests/fixtures/tiny-26b-a4b --backend cuda --prompt-ids 2,17,99,5,250,31 \
  --max-new-tokens 10 --ignore-eos > $OUT/memcheck_gen.txt 2>&1; grep -E "ERROR SUMMARY" $OUT/memcheck_gen.txt >> $X; t
echo "== fixtures tiny-moe, tiny-26b-a4b on cuda, mode down and precedence second" >> $X
SWITCHYARD_MOE_CONCURRENT=down fixtures cuda "tiny-moe tiny-26b-a4b"
SWITCHYARD_CUDA_BRANCH_PRIORITY=second fixtures cuda "tiny-moe tiny-26b-a4b"; t
echo "== 26b-a4b cuda, two rounds" >> $X
for round in 1 2; do
  for cfg in "mlp first" "mlp second" "mlp 0" "down first" "down second" "0 first"; do
    set -- $cfg
    SWITCHYARD_MOE_CONCURRENT=$1 SWITCHYARD_CUDA_BRANCH_PRIORITY=$2 bm "26b $1 $2" $S bench-model --backend cuda --shape 26b-a4b --batch 1,16 --steps 32
  done
  SWITCHYARD_CUDA_PDL=0 SWITCHYARD_MOE_CONCURRENT=mlp bm "26b mlp first PDL0" $S bench-model --backend cuda --shape 26b-a4b --batch 1,16 --steps 32
  SWITCHYARD_CUDA_PDL=0 SWITCHYARD_MOE_CONCURRENT=0 bm "26b 0 - PDL0" $S bench-model --backend cuda --shape 26b-a4b --batch 1,16 --steps 32
  t
done
cat $X
