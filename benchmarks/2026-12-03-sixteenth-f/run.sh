#!/usr/bin/env bash
# Sixteenth session, call f: the model_fixtures test
# batched_decode_matches_single_sequences on cuda (first run on a GPU in call
# e: tiny-e2b sequence 1, 1.157e-2 > 1e-2). Is it deterministic, and does a
# launch feature change it? Same binaries as call e (dist-c5).
mkdir -p dist-new; for b in switchyard model_fixtures; do xz -dc dist-c5/$b.xz > dist-new/$b; done; chmod +x dist-new/*
S=./dist-new/switchyard
source benchmarks/device_lib.sh
[ -d /work/main/tests/fixtures ] || { mkdir -p /work 2>/dev/null; ln -sfn "$PWD" /work/main 2>/dev/null; }
for v in "SY_NONE=1" "SY_NONE=2" "SWITCHYARD_CUDA_PDL=0" "SWITCHYARD_CUDA_CLUSTERS=0" "SWITCHYARD_WGMMA=0" "SWITCHYARD_MOE_CONCURRENT=0"; do
  env $v timeout 60 ./dist-new/model_fixtures --test-threads 1 batched_decode_matches_single_sequences::cuda > $OUT/b_$v.txt 2>&1
  echo "== $v" >> $X; grep -E "16 sequences|panicked:|test result" $OUT/b_$v.txt | cut -c1-220 >> $X
done; t
cat $X
