#!/usr/bin/env bash
# The thirteenth session's changes against the build the session started
# from (a89eac2, measured in its first call), in one call, about 500 s:
#   - WGSL moe_route_decode: a workgroup per (expert, row) with the router row
#     and the norm staged, the selection in the last workgroup to arrive
#     (the old form: 439 us a dispatch, 64% of a wgpu 26b-a4b step);
#   - WGSL moe_combine_post_norms_bf16 with the row in registers;
#   - wgpu dense_gemv_bf16's K split in two dispatches at m >= 2;
#   - CUDA: the MoE decode kernels in programmatic dependent launch (the
#     routing kernel's router row loaded before its wait), and the layer's
#     dense down projection enqueued after the routing (its weight loads in
#     flight while the routing's strict chain runs).
# NEW = ./dist-next/switchyard (this session), PREV = ./dist-prev/switchyard
# (a89eac2), alternating in separate processes.
#
# Here:  cargo build --release -p switchyard-cli && mkdir -p dist-next &&
#        cp target/release/switchyard dist-next/ && strip dist-next/switchyard &&
#        bash scripts/prepare-vulkan.sh .device-vk   (dist-prev: a89eac2's build)
# There: carry dist-next, dist-prev and .device-vk;
#        bash benchmarks/2026-12-03-thirteenth/run.sh
source benchmarks/device_lib.sh
P=./dist-prev/switchyard

echo "== 1. parity cuda, NEW" >> $X
timeout 110 $S parity --backend cuda > $OUT/parity_cuda.txt 2>&1; grep "passed\|FAIL" $OUT/parity_cuda.txt | tail -5 >> $X; t
for tool in memcheck racecheck; do
  ( for f in moe_route_decode moe_gate_up moe_grouped moe_norm_gather moe_combine; do san $tool $f; done; \
    san $tool moe_route_decode SWITCHYARD_CUDA_ROUTE_DECODE=staged ) &
done
echo "== 1. parity wgpu, NEW (and the route's two-dispatch form, the GEMV's one-dispatch form)" >> $X
timeout 120 $S parity --backend wgpu > $OUT/parity_wgpu.txt 2>&1; grep "passed\|FAIL" $OUT/parity_wgpu.txt | tail -5 >> $X
SWITCHYARD_WGSL_ROUTE_PASSES=2 timeout 60 $S parity --backend wgpu --filter route 2>&1 | tail -1 | sed "s/^/route two passes: /" >> $X
SWITCHYARD_WGSL_GEMV_PASSES=1 timeout 60 $S parity --backend wgpu --filter dense_gemv_bf16 2>&1 | tail -1 | sed "s/^/gemv one dispatch: /" >> $X; t
echo "== 1. HF fixtures, NEW" >> $X
fixtures; t
wait
echo "== 1. sanitizers" >> $X
for tool in memcheck racecheck; do grep -E "^cuda: |SUMMARY|^rc=" $OUT/san_$tool.txt | sed "s/^/$tool: /" >> $X; done; t

echo "== 2. 26b-a4b, cuda: NEW / PREV / NEW with SWITCHYARD_CUDA_CLUSTERS=0, three rounds" >> $X
timeout 100 $S bench-model --backend cuda --shape 26b-a4b --batch 1 --steps 4 > /dev/null 2>&1
timeout 100 $P bench-model --backend cuda --shape 26b-a4b --batch 1 --steps 4 > /dev/null 2>&1
for round in 1 2 3; do
  bm "NEW" $S bench-model --backend cuda --shape 26b-a4b --batch 1,16 --steps 32
  bm "PREV" $P bench-model --backend cuda --shape 26b-a4b --batch 1,16 --steps 32
  bm "NEW CLUSTERS=0" env SWITCHYARD_CUDA_CLUSTERS=0 $S bench-model --backend cuda --shape 26b-a4b --batch 1,16 --steps 32
done; t
timeout 150 ncu --clock-control none --profile-from-start off \
  --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --csv --page raw \
  $S bench-model --backend cuda --shape 26b-a4b --batch 1 --steps 2 --profile-timed-steps > $OUT/ncu_26b_b1.csv 2>&1
python3 scripts/ncu_summary.py $OUT/ncu_26b_b1.csv --steps 2 > $OUT/ncu_26b_b1.md 2>&1
head -24 $OUT/ncu_26b_b1.md >> $X; t

echo "== 3. 26b-a4b, wgpu: NEW / PREV, and NEW with the route in two dispatches" >> $X
for round in 1 2; do
  bm "wgpu NEW" $S bench-model --backend wgpu --shape 26b-a4b --batch 1,16 --steps 8
  bm "wgpu PREV" $P bench-model --backend wgpu --shape 26b-a4b --batch 1,16 --steps 8
  bm "wgpu NEW route two passes" env SWITCHYARD_WGSL_ROUTE_PASSES=2 $S bench-model --backend wgpu --shape 26b-a4b --batch 1 --steps 8
done
timeout 90 $S bench-model --backend wgpu --shape 26b-a4b --batch 1 --steps 4 --profile-timed-steps > $OUT/wgpu_26b_profile.txt 2>&1
grep -iE "GPU time|^\| [a-z_0-9]+ \|" $OUT/wgpu_26b_profile.txt | head -24 >> $X; t

echo "== 4. default shape: cuda NEW / PREV / NEW CLUSTERS=0; wgpu NEW / PREV" >> $X
for round in 1 2; do
  bm "cuda NEW" $S bench-model --backend cuda --batch 1,16 --steps 32
  bm "cuda PREV" $P bench-model --backend cuda --batch 1,16 --steps 32
  bm "cuda NEW CLUSTERS=0" env SWITCHYARD_CUDA_CLUSTERS=0 $S bench-model --backend cuda --batch 1,16 --steps 32
  bm "wgpu NEW" $S bench-model --backend wgpu --batch 1,16 --steps 16
  bm "wgpu PREV" $P bench-model --backend wgpu --batch 1,16 --steps 16
done; t

echo "== 5. HF transformers torch.compile decode, 26b-a4b batch 1 (as time allows)" >> $X
left=$((455 - (SECONDS - START)))
if [ $left -gt 120 ]; then
  timeout $((left - 10)) python3 scripts/hf_decode_bench.py --switchyard $S --shape 26b-a4b --batch 1 --modes compile --steps 32 --repeats 2 \
    >> $OUT/hf_decode.jsonl 2>> $OUT/hf_err.txt; echo "rc=$? batch 1" >> $X
  tail -2 $OUT/hf_decode.jsonl >> $X
else
  echo "skipped: $left s left" >> $X
fi; t
cd $OUT && tar czf raw.tgz parity_*.txt san_*.txt model_err.txt ncu_26b_b1.* wgpu_26b_profile.txt hf_err.txt 2>/dev/null && rm -f parity_*.txt san_*.txt ncu_26b_b1.csv
