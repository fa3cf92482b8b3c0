#!/usr/bin/env bash
# Lead's probe 2: wgpu with naga's loop bounding off (default now) vs on.
set -u
S=./dist-lead/switchyard
source .device-vk/env.sh
export SWITCHYARD_REQUIRE_CUDA=1
timeout 60 $S bench-model --backend cuda --batch 1 --steps 32 > $OUT/bm_cuda.md 2>&1
timeout 120 $S bench-model --backend wgpu --batch 1 --steps 16 --profile-timed-steps > $OUT/bm_wgpu.md 2>&1
SWITCHYARD_WGPU_LOOP_BOUNDING=1 timeout 90 $S bench-model --backend wgpu --batch 1 --steps 16 > $OUT/bm_wgpu_lb.md 2>&1
timeout 100 $S bench --backend wgpu --iters 10 --filter gemv > $OUT/bench_wgpu_gemv.md 2>&1
for f in qkv_prep rmsnorm argmax gather attention_decode lm_head; do timeout 60 $S bench --backend wgpu --iters 10 --filter $f >> $OUT/bench_wgpu_mem.md 2>&1; done
tail -1 $OUT/bm_cuda.md; grep -A22 "^| batch" $OUT/bm_wgpu.md | head -26; tail -1 $OUT/bm_wgpu_lb.md
grep "^| " $OUT/bench_wgpu_gemv.md | head -30; grep "^| " $OUT/bench_wgpu_mem.md | grep -v "^| kernel\|^|---" | head -40
