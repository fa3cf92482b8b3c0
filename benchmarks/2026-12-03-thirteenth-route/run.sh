#!/usr/bin/env bash
# WGSL moe_route_decode with the logits staged in workgroup memory for the
# selection and the chain's loads one group ahead (NEW, this session's HEAD)
# against the form the session's second call measured (PREV: 58.9 us a
# dispatch). About 70 s.
# Here:  build as benchmarks/2026-12-03-thirteenth/run.sh says; dist-prev: the
#        build that call ran (bacf727).
# There: carry dist-next, dist-prev and .device-vk;
#        bash benchmarks/2026-12-03-thirteenth-route/run.sh
source benchmarks/device_lib.sh
P=./dist-prev/switchyard
echo "== parity wgpu --filter route, NEW, one and two dispatches" >> $X
timeout 60 $S parity --backend wgpu --filter route 2>&1 | tail -2 >> $X
SWITCHYARD_WGSL_ROUTE_PASSES=2 timeout 60 $S parity --backend wgpu --filter route 2>&1 | tail -2 >> $X
for fx in tiny-moe tiny-26b-a4b; do
  timeout 30 $S generate --model tests/fixtures/$fx --backend wgpu --prompt-ids 2,17,99,5,250,31 \
    --max-new-tokens 10 --ignore-eos --json > /tmp/$fx.wgpu.json 2>>$OUT/model_err.txt
  python3 scripts/compare_fixture.py tests/fixtures/$fx/expected.json /tmp/$fx.wgpu.json "$fx on wgpu vs HF" | tail -1 >> $X
done; t
echo "== 26b-a4b wgpu batch 1: NEW / PREV, two rounds" >> $X
for round in 1 2; do
  bm "wgpu NEW" $S bench-model --backend wgpu --shape 26b-a4b --batch 1 --steps 8
  bm "wgpu PREV" $P bench-model --backend wgpu --shape 26b-a4b --batch 1 --steps 8
done; t
timeout 60 $S bench-model --backend wgpu --shape 26b-a4b --batch 1 --steps 4 --profile-timed-steps > $OUT/wgpu_26b_profile.txt 2>&1
grep -iE "GPU time|^\| [a-z_0-9]+ \|" $OUT/wgpu_26b_profile.txt | head -8 >> $X; t
