#!/usr/bin/env bash
# wgpu decode with the sandwich GEMV (its WGSL plan: the row pass, then the gated GEMV
# reading the normed row from the workspace as vec4) against the two launches
# (SWITCHYARD_SANDWICH_UNFUSED=1), alternating; parity of the changed shaders first.
set -u
export OUT=${OUT:-/tmp/h200}
mkdir -p "$OUT"
X=$OUT/summary.txt
source .device-vk/env.sh
export SWITCHYARD_REQUIRE_WGPU=1
S=./dist-wsw/switchyard
timeout 40 $S parity --backend wgpu --filter gelu 2>&1 | grep -E "passed|FAIL" >> $X
bm() { local tag=$1; shift; env "$@" timeout 40 $S bench-model --backend wgpu --batch 1 --steps 16 2>&1 | grep "^| [0-9]" | sed "s/^/$tag /" >> $X; }
for r in 1 2 3; do bm "fused r$r" X=0; bm "unfused r$r" SWITCHYARD_SANDWICH_UNFUSED=1; done
