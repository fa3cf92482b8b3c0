#!/usr/bin/env bash
# Fourteenth session, second call: where the 26b-a4b decode's latency-bound
# kernels spend their time, per SASS instruction (ncu source page, warp
# stall samples), one launch each inside the timed steps. Build: HEAD after
# the revert of 91bce77 (dist-prev of call a is that tree).
source benchmarks/device_lib.sh
S=./dist-prev/switchyard
for k in moe_route_decode_regs attention_decode_cl moe_combine_post_norms_bf16 dense_gemv_layer_out_rmsnorm_bf16_x2; do
  timeout 120 ncu --clock-control none --profile-from-start off -k regex:$k --launch-skip 3 --launch-count 1 --set full \
    --import-source no --page source --print-source sass --csv \
    $S bench-model --backend cuda --shape 26b-a4b --batch 1 --steps 2 --profile-timed-steps > $OUT/src_$k.csv 2>$OUT/src_$k.err
  echo "$k rc=$? lines=$(wc -l < $OUT/src_$k.csv)" >> $X
  timeout 120 ncu --clock-control none --profile-from-start off -k regex:$k --launch-skip 3 --launch-count 1 --set full \
    $S bench-model --backend cuda --shape 26b-a4b --batch 1 --steps 2 --profile-timed-steps > $OUT/det_$k.txt 2>&1
done; t
