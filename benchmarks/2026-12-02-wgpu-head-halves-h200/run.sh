#!/usr/bin/env bash
# The wgpu bf16 head: a table that fits one binding read as two windows of one pass
# (SWITCHYARD_WGSL_HEAD_HALVES=1) against one window, in the kernel row (HEAD_DIAG's
# half-vocabulary case, 1.4 GB) and in bench-model wgpu batch 1 (the default shape's
# 1.34 GB tied head), alternating.
set -u
export OUT=${OUT:-/tmp/h200}
mkdir -p "$OUT"
X=$OUT/summary.txt
source .device-vk/env.sh
export SWITCHYARD_REQUIRE_WGPU=1
S=./dist-wsw/switchyard
timeout 40 $S bench-model --backend wgpu --batch 1 --steps 4 > /dev/null 2>&1  # pipelines, clocks
SWITCHYARD_WGSL_HEAD_HALVES=1 timeout 40 $S parity --backend wgpu --filter lm_head 2>&1 | grep -E "passed|FAIL" | sed "s/^/HALVES=1 /" >> $X
bm() { local tag=$1; shift; env "$@" timeout 40 $S bench-model --backend wgpu --batch 1 --steps 16 2>&1 | grep "^| [0-9]" | sed "s/^/$tag /" >> $X; }
hd() { local tag=$1; shift; env "$@" SWITCHYARD_BENCH_HEAD_DIAG=1 timeout 40 $S bench --backend wgpu --iters 5 --filter lm_head_logits_bf16 > /tmp/h.txt 2>&1
  cat /tmp/h.txt >> $OUT/bench_head.txt; grep -E "copy ceiling|^\| lm_head_logits_bf16 \| m=1 " /tmp/h.txt | sed "s/^/$tag: /" | cut -c1-230 >> $X; }
for r in 1 2; do
  bm "one window r$r" X=0
  bm "HALVES=1 r$r" SWITCHYARD_WGSL_HEAD_HALVES=1
done
for r in 1 2; do hd "one window r$r" X=0; hd "HALVES=1 r$r" SWITCHYARD_WGSL_HEAD_HALVES=1; done
