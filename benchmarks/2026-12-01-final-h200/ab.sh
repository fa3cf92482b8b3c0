#!/usr/bin/env bash
# A/B: wgpu decode with the gated GEMV on the m = 1 path (switchyard-gated) against the base build, alternating with cuda.
set -u
source .device-vk/env.sh
export SWITCHYARD_REQUIRE_CUDA=1
X=$OUT/ab.txt
for r in 1 2 3; do
  for b in cuda:switchyard wgpu:switchyard wgpu:switchyard-gated; do
    be=${b%%:*}; bin=${b#*:}
    echo "== round $r $be $bin" >> $X
    timeout 40 ./dist/$bin bench-model --backend $be --batch 1 --steps 32 2>&1 | grep "^| 1 |" >> $X
  done
done
echo "== gated parity wgpu" >> $X
timeout 60 ./dist/switchyard-gated parity --backend wgpu 2>&1 | tail -2 >> $X
echo "== gated profile" >> $X
timeout 40 ./dist/switchyard-gated bench-model --backend wgpu --batch 1 --steps 8 --profile-timed-steps 2>&1 | grep -E "^\| (dense|attention)|^batch 1" >> $X
cat $X
