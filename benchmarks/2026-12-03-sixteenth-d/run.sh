#!/usr/bin/env bash
# Sixteenth session, call d. Splits of the concurrent MoE layer at one row
# (SWITCHYARD_MOE_CONCURRENT): mlp (routing + experts beside dense gate/up +
# down; the default), early (routing beside the experts' input from a zero
# pair map + dense gate/up + down, then the experts), split (routing beside
# input + dense gate/up, then the experts beside down), input (routing beside
# input, then the experts beside dense gate/up + down), 0 (in line).
# There: carry dist-c4 and .device-vk; bash benchmarks/2026-12-03-sixteenth-d/run.sh
mkdir -p dist-new; xz -dc dist-c4/new.xz > dist-new/switchyard; chmod +x dist-new/*
S=./dist-new/switchyard
source benchmarks/device_lib.sh
echo "== fixtures tiny-moe, tiny-26b-a4b on cuda per mode" >> $X
for mode in mlp early split input 0; do SWITCHYARD_MOE_CONCURRENT=$mode fixtures cuda "tiny-moe tiny-26b-a4b"; done; t
echo "== 26b-a4b cuda batch 1, three rounds" >> $X
for round in 1 2 3; do
  for mode in mlp early split input 0; do
    SWITCHYARD_MOE_CONCURRENT=$mode bm "26b $mode" $S bench-model --backend cuda --shape 26b-a4b --batch 1 --steps 48
  done; t
done
cat $X
