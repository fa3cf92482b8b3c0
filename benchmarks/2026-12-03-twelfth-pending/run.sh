#!/usr/bin/env bash
# The twelfth session's changes, built and tested here (cpu, lavapipe, NVRTC
# compile) but not run on a GPU (the session had 231 s of device time, under
# what a start needs). One call, about 560 s with the eleventh session's part:
#
#   1. Correctness: parity on cuda and wgpu (every case, replay identity), the
#      six HF fixtures on cuda and wgpu, compute-sanitizer memcheck and
#      racecheck over the new and changed kernels (moe_norm_gather_bf16,
#      moe_combine_post_norms_bf16, moe_route_decode's regs entry and, with
#      SWITCHYARD_CUDA_ROUTE_DECODE=staged, the staged one).
#   2. 26b-a4b decode (issue 12 item 5), cuda, batch 1 and 16, three rounds,
#      variants alternating in separate processes:
#        N  every default (route_decode regs, the MoE row fusions)
#        R  SWITCHYARD_CUDA_ROUTE_DECODE=staged
#        G  SWITCHYARD_MOE_GATHER_UNFUSED=1   (rmsnorm + gather)
#        C  SWITCHYARD_MOE_COMBINE_UNFUSED=1  (combine, rmsnorm, sandwich)
#        O  all three (the build of the eleventh session)
#      then ncu's per-kernel times over two timed steps of N at batch 1.
#   2a. 26b-a4b on wgpu at batch 1 and 16 (and batch 1 with the routing in
#      two dispatches, SWITCHYARD_WGSL_ROUTE_PASSES=2), and a profiled batch-1 step
#      (per-dispatch GPU time): wgpu ran it at 9% of its bound when last
#      measured (fourth session), and no profile says why.
#   2b. The default shape on cuda at batch 1 and 16, two rounds: every
#      default, then SWITCHYARD_CUDA_CLUSTERS=0, SWITCHYARD_ATTN_DECODE_CLUSTER=1
#      and SWITCHYARD_CUDA_PDL=0, to see whether earlier A/Bs still hold.
#   3. The eleventh session's part (benchmarks/2026-12-02-eleventh-pending/
#      run.sh: the wgpu one-dispatch forms, qkv VPL, cuda default and nvfp4,
#      HF torch.compile at batch 1 and 16), into $OUT/eleventh.
#
# Here:  cargo build --release -p switchyard-cli && mkdir -p dist-next &&
#        cp target/release/switchyard dist-next/ && strip dist-next/switchyard &&
#        bash scripts/prepare-vulkan.sh .device-vk
# There: carry dist-next and .device-vk;
#        bash benchmarks/2026-12-03-twelfth-pending/run.sh
source benchmarks/device_lib.sh

echo "== 1. parity cuda" >> $X
timeout 110 $S parity --backend cuda > $OUT/parity_cuda.txt 2>&1; grep "passed\|FAIL" $OUT/parity_cuda.txt | tail -5 >> $X; t
for tool in memcheck racecheck; do
  ( san $tool moe_norm_gather; san $tool moe_combine_post_norms; san $tool moe_route_decode; \
    san $tool moe_route_decode SWITCHYARD_CUDA_ROUTE_DECODE=staged ) &
done
echo "== 1. parity cuda, route_decode staged" >> $X
SWITCHYARD_CUDA_ROUTE_DECODE=staged timeout 60 $S parity --backend cuda --filter route 2>&1 | tail -1 >> $X
echo "== 1. parity wgpu" >> $X
timeout 120 $S parity --backend wgpu > $OUT/parity_wgpu.txt 2>&1; grep "passed\|FAIL" $OUT/parity_wgpu.txt | tail -5 >> $X; t
echo "== 1. HF fixtures" >> $X
fixtures; t
wait
echo "== 1. sanitizers" >> $X
for tool in memcheck racecheck; do grep -E "^cuda: |SUMMARY|^rc=" $OUT/san_$tool.txt | sed "s/^/$tool: /" >> $X; done; t

echo "== 2. 26b-a4b, cuda" >> $X
timeout 100 $S bench-model --backend cuda --shape 26b-a4b --batch 1 --steps 4 > /dev/null 2>&1 # module compiles
for round in 1 2 3; do
  bm "N" $S bench-model --backend cuda --shape 26b-a4b --batch 1,16 --steps 32
  bm "R" env SWITCHYARD_CUDA_ROUTE_DECODE=staged $S bench-model --backend cuda --shape 26b-a4b --batch 1,16 --steps 32
  bm "G" env SWITCHYARD_MOE_GATHER_UNFUSED=1 $S bench-model --backend cuda --shape 26b-a4b --batch 1,16 --steps 32
  bm "C" env SWITCHYARD_MOE_COMBINE_UNFUSED=1 $S bench-model --backend cuda --shape 26b-a4b --batch 1,16 --steps 32
  bm "O" env SWITCHYARD_CUDA_ROUTE_DECODE=staged SWITCHYARD_MOE_GATHER_UNFUSED=1 SWITCHYARD_MOE_COMBINE_UNFUSED=1 \
    $S bench-model --backend cuda --shape 26b-a4b --batch 1,16 --steps 32
done; t
timeout 150 ncu --clock-control none --profile-from-start off \
  --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --csv --page raw \
  $S bench-model --backend cuda --shape 26b-a4b --batch 1 --steps 2 --profile-timed-steps > $OUT/ncu_26b_b1.csv 2>&1
python3 scripts/ncu_summary.py $OUT/ncu_26b_b1.csv --steps 2 > $OUT/ncu_26b_b1.md 2>&1
head -40 $OUT/ncu_26b_b1.md >> $X; t

echo "== 2a. 26b-a4b, wgpu: tok/s and where a batch-1 step goes (GPU time per dispatch)" >> $X
SWITCHYARD_WGSL_ROUTE_PASSES=2 timeout 60 $S parity --backend wgpu --filter route 2>&1 | tail -1 | sed "s/^/route two passes: /" >> $X
for round in 1 2; do
  bm "wgpu 26b-a4b" $S bench-model --backend wgpu --shape 26b-a4b --batch 1,16 --steps 8
  bm "wgpu 26b-a4b, route in two passes" env SWITCHYARD_WGSL_ROUTE_PASSES=2 $S bench-model --backend wgpu --shape 26b-a4b --batch 1 --steps 8
done
timeout 90 $S bench-model --backend wgpu --shape 26b-a4b --batch 1 --steps 4 --profile-timed-steps > $OUT/wgpu_26b_profile.txt 2>&1
grep -iE "GPU time|^\| [a-z_0-9]+ \|" $OUT/wgpu_26b_profile.txt | head -40 >> $X; t

echo "== 2b. default shape, cuda: the switches of earlier A/Bs, again after every change since" >> $X
for round in 1 2; do
  bm "defaults" $S bench-model --backend cuda --batch 1,16 --steps 32
  bm "CLUSTERS=0" env SWITCHYARD_CUDA_CLUSTERS=0 $S bench-model --backend cuda --batch 1,16 --steps 32
  bm "ATTN_DECODE_CLUSTER=1" env SWITCHYARD_ATTN_DECODE_CLUSTER=1 $S bench-model --backend cuda --batch 1,16 --steps 32
  bm "PDL=0" env SWITCHYARD_CUDA_PDL=0 $S bench-model --backend cuda --batch 1,16 --steps 32
done; t

echo "== 3. the eleventh session's part" >> $X
left=$((590 - (SECONDS - START))); [ $left -lt 30 ] && left=30
OUT=$OUT/eleventh S=$S timeout $left bash benchmarks/2026-12-02-eleventh-pending/run.sh
cat $OUT/eleventh/summary.txt >> $X; t
cd $OUT && tar czf raw12.tgz parity_*.txt san_*.txt model_err.txt ncu_26b_b1.* wgpu_26b_profile.txt 2>/dev/null && rm -f parity_*.txt san_*.txt ncu_26b_b1.csv
