#!/usr/bin/env bash
# Fourteenth session, first call (about 240 s).
#  A. The thirteenth session's pending change (gemv_m1's unnormed entries:
#     the first weight batch volatile, kept in front of griddepcontrol.wait):
#     parity and both sanitizers over the GEMV families, then bench-model NEW
#     (HEAD 8548c45) against PREV (the same tree with gemv.cu at 91bce77^),
#     alternating in separate processes.
#  B. What each decode kernel family costs inside the replayed step: a build
#     with timing.patch (not committed) launches every pass whose entry starts
#     with a prefix in SWITCHYARD_TIMING_DOUBLE twice (same inputs, same
#     outputs), so the step grows by that family's in-graph cost.
# Here:  cargo build --release -p switchyard-cli; strip into dist-next;
#        gemv.cu from 91bce77^ into the tree, build, strip into dist-prev;
#        git apply timing.patch, build, strip into dist-skip.
# There: carry dist-next, dist-prev, dist-skip, .device-vk; bash benchmarks/2026-12-03-fourteenth-a/run.sh
source benchmarks/device_lib.sh
P=./dist-prev/switchyard
D=./dist-skip/switchyard

echo "== A. parity cuda --filter gemv (NEW) and sanitizers" >> $X
timeout 60 $S parity --backend cuda --filter gemv 2>&1 | tail -1 >> $X
for tool in memcheck racecheck; do san $tool dense_gemv_bf16; san $tool dense_gemv_gelu_mul; done
for tool in memcheck racecheck; do grep -E "^cuda: |SUMMARY|^rc=" $OUT/san_$tool.txt | sed "s/^/$tool: /" >> $X; done; t

echo "== A. bench-model cuda NEW / PREV alternating (warm-up runs first)" >> $X
for shape in default 26b-a4b; do
  timeout 100 $S bench-model --backend cuda --shape $shape --batch 1 --steps 4 > /dev/null 2>&1
  timeout 100 $P bench-model --backend cuda --shape $shape --batch 1 --steps 4 > /dev/null 2>&1
done; t
for round in 1 2 3; do
  bm "default NEW" $S bench-model --backend cuda --batch 1,16 --steps 32
  bm "default PREV" $P bench-model --backend cuda --batch 1,16 --steps 32
  bm "26b NEW" $S bench-model --backend cuda --shape 26b-a4b --batch 1 --steps 32
  bm "26b PREV" $P bench-model --backend cuda --shape 26b-a4b --batch 1 --steps 32
done; t

echo "== B. in-graph family cost: each family launched twice (26b-a4b batch 1)" >> $X
bm "26b base" $D bench-model --backend cuda --shape 26b-a4b --batch 1 --steps 32
for fam in moe_route_decode attention_decode moe_combine_post_norms moe_norm_gather qkv_prep dense_gemv_sandwich moe_gate_up_gelu moe_grouped_gemm dense_gemv_bf16_m1 dense_gemv_layer_out; do
  bm "26b x2 $fam" env SWITCHYARD_TIMING_DOUBLE=$fam $D bench-model --backend cuda --shape 26b-a4b --batch 1 --steps 32
done
bm "26b base" $D bench-model --backend cuda --shape 26b-a4b --batch 1 --steps 32; t
echo "== B. the same, default shape batch 1" >> $X
bm "default base" $D bench-model --backend cuda --batch 1 --steps 32
for fam in attention_decode qkv_prep dense_gemv_bf16_m1 dense_gemv_layer_out dense_gemv_sandwich lm_head argmax; do
  bm "default x2 $fam" env SWITCHYARD_TIMING_DOUBLE=$fam $D bench-model --backend cuda --batch 1 --steps 32
done
bm "default base" $D bench-model --backend cuda --batch 1 --steps 32; t
