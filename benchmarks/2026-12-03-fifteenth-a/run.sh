#!/usr/bin/env bash
# Fifteenth session, call a. NEW = the router order (32 partials of 8-wide k
# chunks and a pairwise tree, every backend) and the WGSL m = 1 GEMV loads as
# named values; OLD = 1225499 (the fourteenth session's HEAD).
# Correctness of NEW on both backends (parity at three seeds for the router
# families, sanitizers, the six HF fixtures), then NEW / OLD alternating on
# the decode rows the change touches, the routing kernel under ncu, prefill.
# There: carry dist-c1 and .device-vk; PART=1 bash benchmarks/2026-12-03-fifteenth-a/run.sh, then PART=2
# (a device call runs at most 600 s).
for d in new old; do mkdir -p dist-$d; xz -dc dist-c1/$d.xz > dist-$d/switchyard; chmod +x dist-$d/switchyard; done
S=./dist-new/switchyard
source benchmarks/device_lib.sh
PART=${PART:-1}
if [[ $PART == 1 ]]; then
echo "== parity NEW, cuda and wgpu (Vulkan)" >> $X
for be in cuda wgpu; do timeout 100 $S parity --backend $be > $OUT/parity_$be.txt 2>&1; tail -2 $OUT/parity_$be.txt | head -1 >> $X; done
grep -hE "\| fail" $OUT/parity_*.txt | head -5 >> $X; t
echo "== router families, seeds 1 and 2; wgpu with the routing in two dispatches and without subgroups" >> $X
for seed in 1 2; do for be in cuda wgpu; do for f in dense_gemm_router moe_route_decode; do
  timeout 30 $S parity --backend $be --filter $f --seed $seed 2>&1 | tail -2 | head -1 | sed "s/^/seed $seed $f /" >> $X
done; done; done
SWITCHYARD_WGSL_ROUTE_PASSES=2 timeout 30 $S parity --backend wgpu --filter moe_ 2>&1 | tail -2 | head -1 | sed "s/^/ROUTE_PASSES=2 moe_ /" >> $X
SWITCHYARD_WGPU_SUBGROUPS=0 timeout 30 $S parity --backend wgpu --filter moe_route_decode 2>&1 | tail -2 | head -1 | sed "s/^/SUBGROUPS=0 moe_route_decode /" >> $X
SWITCHYARD_WGPU_SUBGROUPS=0 timeout 30 $S parity --backend wgpu --filter gemv 2>&1 | tail -2 | head -1 | sed "s/^/SUBGROUPS=0 gemv /" >> $X
SWITCHYARD_CUDA_ROUTE_DECODE=staged timeout 30 $S parity --backend cuda --filter moe_route_decode 2>&1 | tail -2 | head -1 | sed "s/^/staged moe_route_decode /" >> $X; t
echo "== sanitizers NEW" >> $X
for f in dense_gemm_router moe_route_decode; do san memcheck $f; san racecheck $f; done
grep -hE "ERROR SUMMARY|RACECHECK SUMMARY|^rc=" $OUT/san_*.txt >> $X; t
echo "== HF fixtures NEW" >> $X
fixtures; t
echo "== 26b-a4b: NEW / OLD, two rounds, cuda then wgpu" >> $X
for round in 1 2; do
  for b in new old; do bm "cuda 26b $b" ./dist-$b/switchyard bench-model --backend cuda --shape 26b-a4b --batch 1,16 --steps 32; done
done
for round in 1 2; do
  for b in new old; do bm "wgpu 26b $b" ./dist-$b/switchyard bench-model --backend wgpu --shape 26b-a4b --batch 1,16 --steps 8; done
done; t
echo "== default shape: wgpu NEW / OLD two rounds (the m = 1 GEMV loads), cuda NEW" >> $X
for round in 1 2; do
  for b in new old; do bm "wgpu default $b" ./dist-$b/switchyard bench-model --backend wgpu --batch 1,16 --steps 16; done
done
bm "cuda default new" $S bench-model --backend cuda --batch 1,16 --steps 32; t
fi
if [[ $PART == 2 ]]; then
echo "== NEW variants: cuda staged routing entry; wgpu routing in two dispatches" >> $X
SWITCHYARD_CUDA_ROUTE_DECODE=staged bm "cuda 26b new staged" $S bench-model --backend cuda --shape 26b-a4b --batch 1 --steps 32
SWITCHYARD_WGSL_ROUTE_PASSES=2 bm "wgpu 26b new 2pass" $S bench-model --backend wgpu --shape 26b-a4b --batch 1 --steps 8
SWITCHYARD_WGSL_ROUTE_PASSES=2 timeout 60 $S bench-model --backend wgpu --shape 26b-a4b --batch 1 --steps 4 --profile-timed-steps > $OUT/wgpu_26b_profile_2pass.txt 2>&1
timeout 60 $S bench-model --backend wgpu --shape 26b-a4b --batch 1 --steps 4 --profile-timed-steps > $OUT/wgpu_26b_profile.txt 2>&1
echo "profile NEW (route in two dispatches):" >> $X; grep -E "^\| (moe_|attention|dense|qkv)" $OUT/wgpu_26b_profile_2pass.txt | head -13 >> $X
echo "profile NEW:" >> $X; grep -E "^\| (moe_|attention|dense|qkv)" $OUT/wgpu_26b_profile.txt | head -12 >> $X
timeout 60 ./dist-old/switchyard bench-model --backend wgpu --batch 1 --steps 4 --profile-timed-steps > $OUT/wgpu_default_profile_old.txt 2>&1
timeout 60 $S bench-model --backend wgpu --batch 1 --steps 4 --profile-timed-steps > $OUT/wgpu_default_profile_new.txt 2>&1
for b in old new; do echo "profile default wgpu $b:" >> $X; grep -E "^\| (dense|attention|qkv|lm_head|argmax)" $OUT/wgpu_default_profile_$b.txt | head -8 >> $X; done; t
echo "== ncu: the routing kernel in a timed 26b-a4b step, NEW and OLD" >> $X
for b in new old; do
  timeout 90 ncu --clock-control none --profile-from-start off -k regex:moe_route_decode --launch-skip 3 --launch-count 1 \
    ./dist-$b/switchyard bench-model --backend cuda --shape 26b-a4b --batch 1 --steps 4 --profile-timed-steps > $OUT/ncu_route_$b.txt 2>&1
  grep -E "moe_route_decode|Duration|Registers Per|Achieved Occupancy" $OUT/ncu_route_$b.txt | head -5 | sed "s/^/$b /" >> $X
done; t
echo "== prefill 4096, 26b-a4b cuda: NEW / OLD (the router's tile entry)" >> $X
for b in new old; do timeout 90 ./dist-$b/switchyard bench-model --backend cuda --shape 26b-a4b --batch 1 --steps 4 --prefill-len 4096 2>&1 | grep -iE "^\| [0-9]|prefill" | tail -3 | sed "s/^/$b /" >> $X; done; t
fi
cd $OUT && tar czf raw.tgz parity_*.txt san_*.txt model_err.txt wgpu_*profile*.txt ncu_route_*.txt 2>/dev/null && rm -f parity_*.txt san_*.txt model_err.txt
