#!/usr/bin/env bash
# The eleventh session's changes, built and tested here (cpu, lavapipe, NVRTC
# compile) but not yet run on a GPU: the session had no device time left
# (231 s, under the 240 s a start needs). One call, about 300 s, measures them.
#
#   1. wgpu argmax_rows in one dispatch on the backend's arrival counters
#      (default now) against the two-pass plan (SWITCHYARD_WGSL_ARGMAX_PASSES=2):
#      parity both ways, the bench row (m 16 x 262144) two rounds each,
#      alternating processes, and bench-model wgpu batch 1.
#   2. wgpu qkv_prep with two head vectors a lane (SWITCHYARD_WGSL_QKV_VPL=2,
#      opt-in) against one: parity, and the bench row two rounds each.
#   3. wgpu decode attention in one dispatch (default up to 16 chunks) against
#      two (SWITCHYARD_WGSL_DECODE_PASSES=2), and the plain GEMV's K split in
#      one dispatch against partials + reduce (SWITCHYARD_WGSL_GEMV_PASSES=2):
#      and the two fused-row GEMVs without their row pass against with it
#      (SWITCHYARD_WGSL_LAYER_OUT_ROW_PASS=1, SWITCHYARD_WGSL_SANDWICH_ROW_PASS=1):
#      bench-model wgpu batch 1 and 16, alternating, and a profiled step of
#      each (per-dispatch GPU time).
#   4. The targets not re-measured in the tenth session, from the same call:
#      bench-model --quant nvfp4 beside bf16 at batch 1, and HF transformers'
#      torch.compile decode at batch 1 and 16 (scripts/hf_decode_bench.py).
#
# Here:  cargo build --release -p switchyard-cli && mkdir -p dist-next &&
#        cp target/release/switchyard dist-next/ && strip dist-next/switchyard &&
#        bash scripts/prepare-vulkan.sh .device-vk
# There: carry dist-next and .device-vk;
#        bash benchmarks/2026-12-02-eleventh-pending/run.sh
source benchmarks/device_lib.sh

echo "== 1. wgpu argmax: parity one pass / two passes" >> $X
timeout 60 $S parity --backend wgpu --filter argmax 2>&1 | tail -1 >> $X
SWITCHYARD_WGSL_ARGMAX_PASSES=2 timeout 60 $S parity --backend wgpu --filter argmax 2>&1 | tail -1 >> $X
# ab VAR "v1 v2" FILTER: the kernel bench's FILTER rows under VAR=v, two rounds, alternating.
ab() {
  for round in 1 2; do
    for v in $2; do
      env $1=$v timeout 40 $S bench --backend wgpu --iters 10 --filter $3 > $OUT/bench_$3_$v.$round.txt 2>&1
      grep -E "copy ceiling|^\| $3" $OUT/bench_$3_$v.$round.txt | cut -c1-220 | sed "s/^/$1=$v round $round: /" >> $X
    done
  done
}
ab SWITCHYARD_WGSL_ARGMAX_PASSES "1 2" argmax_rows; t

echo "== 2. wgpu qkv_prep: parity VPL 2, bench rows VPL 1 / 2" >> $X
SWITCHYARD_WGSL_QKV_VPL=2 timeout 60 $S parity --backend wgpu --filter qkv_prep 2>&1 | tail -1 >> $X
ab SWITCHYARD_WGSL_QKV_VPL "1 2" qkv_prep; t

echo "== bench-model" >> $X
# The first run in a process set compiles the CUDA modules: a warm-up.
timeout 100 $S bench-model --backend cuda --batch 1 --steps 4 > /dev/null 2>&1
bm "cuda" $S bench-model --backend cuda --batch 1,16 --steps 32
bm "cuda nvfp4" $S bench-model --backend cuda --quant nvfp4 --batch 1 --steps 32
for round in 1 2; do
  bm "wgpu (all defaults)" $S bench-model --backend wgpu --batch 1,16 --steps 16
  bm "wgpu argmax two passes" env SWITCHYARD_WGSL_ARGMAX_PASSES=2 $S bench-model --backend wgpu --batch 1 --steps 16
  bm "wgpu decode two passes" env SWITCHYARD_WGSL_DECODE_PASSES=2 $S bench-model --backend wgpu --batch 1,16 --steps 16
  bm "wgpu gemv two passes" env SWITCHYARD_WGSL_GEMV_PASSES=2 $S bench-model --backend wgpu --batch 1,16 --steps 16
  bm "wgpu row passes" env SWITCHYARD_WGSL_LAYER_OUT_ROW_PASS=1 SWITCHYARD_WGSL_SANDWICH_ROW_PASS=1 \
    $S bench-model --backend wgpu --batch 1 --steps 16
  bm "wgpu all as before" env SWITCHYARD_WGSL_GEMV_PASSES=2 SWITCHYARD_WGSL_DECODE_PASSES=2 SWITCHYARD_WGSL_ARGMAX_PASSES=2 \
    SWITCHYARD_WGSL_LAYER_OUT_ROW_PASS=1 SWITCHYARD_WGSL_SANDWICH_ROW_PASS=1 $S bench-model --backend wgpu --batch 1,16 --steps 16
  bm "wgpu qkv VPL 2" env SWITCHYARD_WGSL_QKV_VPL=2 $S bench-model --backend wgpu --batch 1 --steps 16
done; t
for passes in 1 2; do
  row=$((passes - 1))  # 0: not set (one dispatch), 1: the row passes
  env SWITCHYARD_WGSL_DECODE_PASSES=$passes SWITCHYARD_WGSL_GEMV_PASSES=$passes SWITCHYARD_WGSL_ARGMAX_PASSES=$passes \
    SWITCHYARD_WGSL_LAYER_OUT_ROW_PASS=$row SWITCHYARD_WGSL_SANDWICH_ROW_PASS=$row timeout 60 $S bench-model --backend wgpu --batch 1 --steps 8 --profile-timed-steps \
    > $OUT/bench_profile_decode_$passes.txt 2>&1
  grep -E "GPU time of one|attention_decode|argmax|dense_gemv" $OUT/bench_profile_decode_$passes.txt | sed "s/^/passes=$passes: /" >> $X
done; t

echo "== 4. HF transformers torch.compile decode, default shape" >> $X
for b in 1 16; do
  timeout 200 python3 scripts/hf_decode_bench.py --switchyard $S --shape default --batch $b --modes compile --steps 32 --repeats 2 \
    --out $OUT/hf_decode.jsonl > $OUT/hf_b$b.log 2>&1; echo "rc=$? batch $b" >> $X
done
tail -4 $OUT/hf_decode.jsonl >> $X; t
cd $OUT && tar czf raw.tgz bench_*.txt hf_*.log 2>/dev/null && rm -f bench_*.txt hf_*.log
