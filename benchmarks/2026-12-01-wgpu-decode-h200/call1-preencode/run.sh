#!/usr/bin/env bash
# Lead's probe: wgpu decode profile (default shape, b1) with the pre-encoded replays, beside cuda b1.
set -u
S=./dist-lead/switchyard
source .device-vk/env.sh
export SWITCHYARD_REQUIRE_CUDA=1
timeout 60 $S bench-model --backend cuda --batch 1 --steps 32 > $OUT/bm_cuda.md 2>&1
timeout 150 $S bench-model --backend wgpu --batch 1 --steps 16 --profile-timed-steps > $OUT/bm_wgpu.md 2>&1
SWITCHYARD_WGPU_SUBGROUPS=0 timeout 90 $S bench-model --backend wgpu --batch 1 --steps 16 > $OUT/bm_wgpu_nosg.md 2>&1
tail -3 $OUT/bm_cuda.md; cat $OUT/bm_wgpu.md | tail -32; tail -2 $OUT/bm_wgpu_nosg.md
