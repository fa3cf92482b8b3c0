#!/usr/bin/env bash
# The thirteenth session's last change, built and checked here (NVRTC sm_90
# compile: dense_gemv_bf16_m1 80 registers, 0 spills) but not run on a GPU:
# the session's device time was spent. About 150 s.
#   CUDA gemv_m1's unnormed entries (dense_gemv_bf16_m1, the m = 1 gated
#   GEMV) issue their first batch of weight loads as volatile asm, so they
#   stay in front of griddepcontrol.wait (the normed entries' ninth-session
#   change, +2%). On 26b-a4b the plain m = 1 GEMV is the q/k/v and the dense
#   down projection (60 launches a step), the latter now launched early by
#   the routing kernel.
# NEW = HEAD's build, PREV = 50f7f72's (the build the thirteenth session's
# calls measured), alternating in separate processes.
#
# Here:  cargo build --release -p switchyard-cli && mkdir -p dist-next &&
#        cp target/release/switchyard dist-next/ && strip dist-next/switchyard &&
#        git worktree add /tmp/prev 50f7f72 && (cd /tmp/prev && cargo build --release -p switchyard-cli) &&
#        mkdir -p dist-prev && cp /tmp/prev/target/release/switchyard dist-prev/ && strip dist-prev/switchyard &&
#        bash scripts/prepare-vulkan.sh .device-vk
# There: carry dist-next, dist-prev and .device-vk;
#        bash benchmarks/2026-12-03-thirteenth-pending/run.sh
source benchmarks/device_lib.sh
P=./dist-prev/switchyard

echo "== parity cuda --filter gemv, NEW; sanitizers" >> $X
timeout 60 $S parity --backend cuda --filter gemv 2>&1 | tail -2 >> $X
for tool in memcheck racecheck; do san $tool dense_gemv_bf16; san $tool dense_gemv_gelu_mul; done
for tool in memcheck racecheck; do grep -E "^cuda: |SUMMARY|^rc=" $OUT/san_$tool.txt | sed "s/^/$tool: /" >> $X; done; t

echo "== bench-model cuda, NEW / PREV, three rounds" >> $X
for shape in default 26b-a4b; do
  timeout 100 $S bench-model --backend cuda --shape $shape --batch 1 --steps 4 > /dev/null 2>&1
  timeout 100 $P bench-model --backend cuda --shape $shape --batch 1 --steps 4 > /dev/null 2>&1
done
for round in 1 2 3; do
  for shape in default 26b-a4b; do
    bm "$shape NEW" $S bench-model --backend cuda --shape $shape --batch 1,16 --steps 32
    bm "$shape PREV" $P bench-model --backend cuda --shape $shape --batch 1,16 --steps 32
  done
done; t
