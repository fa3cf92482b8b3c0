#!/usr/bin/env bash
# Fifteenth session, call c. NEXT = the one-row CUDA routing entry
# moe_route_decode_warp (a warp an expert, nothing staged);
# SWITCHYARD_CUDA_ROUTE_DECODE=regs runs the same binary on the registers
# entry of call a (a block an expert). Correctness, then the A/B.
# There: carry dist-c3 and .device-vk; bash benchmarks/2026-12-03-fifteenth-c/run.sh
mkdir -p dist-next; xz -dc dist-c3/next.xz > dist-next/switchyard; chmod +x dist-next/switchyard
S=./dist-next/switchyard
source benchmarks/device_lib.sh
echo "== parity NEXT: cuda (all), wgpu (all); the routing at seeds 1 and 2" >> $X
for be in cuda wgpu; do timeout 100 $S parity --backend $be > $OUT/parity_$be.txt 2>&1; tail -2 $OUT/parity_$be.txt | head -1 >> $X; done
for seed in 1 2; do timeout 30 $S parity --backend cuda --filter moe_route_decode --seed $seed 2>&1 | tail -2 | head -1 | sed "s/^/seed $seed /" >> $X; done
SWITCHYARD_CUDA_ROUTE_DECODE=regs timeout 30 $S parity --backend cuda --filter moe_route_decode 2>&1 | tail -2 | head -1 | sed "s/^/regs /" >> $X
grep -hE "\| fail" $OUT/parity_*.txt | head -5 >> $X; t
san memcheck moe_route_decode; san racecheck moe_route_decode
grep -hE "ERROR SUMMARY|RACECHECK SUMMARY|^rc=" $OUT/san_*.txt >> $X; t
echo "== HF fixtures NEXT, cuda" >> $X
fixtures cuda; t
echo "== cuda 26b-a4b: warp (default) / regs, three rounds" >> $X
for round in 1 2 3; do
  bm "cuda 26b warp" $S bench-model --backend cuda --shape 26b-a4b --batch 1,16 --steps 32
  SWITCHYARD_CUDA_ROUTE_DECODE=regs bm "cuda 26b regs" $S bench-model --backend cuda --shape 26b-a4b --batch 1 --steps 32
done; t
bm "cuda default" $S bench-model --backend cuda --batch 1,16 --steps 32; t
echo "== ncu: the routing kernel in a timed 26b-a4b step" >> $X
for v in warp regs; do
  env SWITCHYARD_CUDA_ROUTE_DECODE=$([[ $v == regs ]] && echo regs || echo default) timeout 90 ncu --clock-control none --profile-from-start off -k regex:moe_route_decode --launch-skip 3 --launch-count 1 \
    $S bench-model --backend cuda --shape 26b-a4b --batch 1 --steps 4 --profile-timed-steps > $OUT/ncu_route_$v.txt 2>&1
  grep -E "moe_route_decode|Duration|Registers Per|Achieved Occupancy" $OUT/ncu_route_$v.txt | head -5 | sed "s/^/$v /" >> $X
done; t
cd $OUT && tar czf raw.tgz parity_*.txt san_*.txt model_err.txt ncu_route_*.txt 2>/dev/null && rm -f parity_*.txt san_*.txt model_err.txt
