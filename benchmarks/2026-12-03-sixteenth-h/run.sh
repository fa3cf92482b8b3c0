#!/usr/bin/env bash
# Sixteenth session, call h: the model_fixtures test binary with the batched
# test's CUDA bounds at the whole-model rule (batched_bounds: cosine and rel), every test on
# every backend (cuda, wgpu under Vulkan, cpu).
mkdir -p dist-new; xz -dc dist-c7/model_fixtures.xz > dist-new/model_fixtures; chmod +x dist-new/*
S=/bin/true
source benchmarks/device_lib.sh
[ -d /work/main/tests/fixtures ] || { mkdir -p /work 2>/dev/null; ln -sfn "$PWD" /work/main 2>/dev/null; }
timeout 200 ./dist-new/model_fixtures --test-threads 1 > $OUT/model_fixtures.txt 2>&1
grep -E "^test |test result|panicked|16 sequences" $OUT/model_fixtures.txt | cut -c1-200 >> $X; t
cat $X
