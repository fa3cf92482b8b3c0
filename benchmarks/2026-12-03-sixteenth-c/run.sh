#!/usr/bin/env bash
# Sixteenth session, call c. Where the concurrent MoE layer's time goes: a
# timing-only build (timing_skip.patch, not committed; its outputs are wrong
# where it skips) with SY_TIMING_SKIP = side (no dense MLP) / main (no
# routing or experts) / serial (the same launches in order, no fork) /
# none, against the committed build's in-line graph. 26b-a4b cuda, two rounds.
# There: carry dist-c3 and .device-vk; bash benchmarks/2026-12-03-sixteenth-c/run.sh
mkdir -p dist-new; xz -dc dist-c3/new.xz > dist-new/switchyard; xz -dc dist-c3/timing.xz > dist-new/timing; chmod +x dist-new/*
S=./dist-new/switchyard
source benchmarks/device_lib.sh
for round in 1 2; do
  for skip in none side main serial; do
    SY_TIMING_SKIP=$skip bm "26b skip=$skip" ./dist-new/timing bench-model --backend cuda --shape 26b-a4b --batch 1,16 --steps 32
  done
  SWITCHYARD_MOE_CONCURRENT=0 bm "26b inline" $S bench-model --backend cuda --shape 26b-a4b --batch 1,16 --steps 32
  t
done
cat $X
