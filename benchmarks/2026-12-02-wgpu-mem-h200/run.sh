#!/bin/bash
# One device call: parity of the changed kernels, vec4 paths and timestamp floor, then before/after benches.
cd "$(dirname "$0")/.."
source .device-vk/env.sh
D=dist-wgpumem
for f in switchyard switchyard-before timing vec4_paths; do xz -d -k -f $D/$f.xz; chmod +x $D/$f; done
export SWITCHYARD_REQUIRE_WGPU=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt 2>&1
for f in qkv_prep gather lm_head_logits argmax; do
  timeout 60 $D/switchyard parity --backend wgpu --filter $f > $OUT/parity_$f.md 2>&1; echo "parity $f rc=$?" | tee -a $OUT/summary.txt
done
timeout 40 $D/vec4_paths --test-threads 1 > $OUT/vec4_paths.txt 2>&1; echo "vec4_paths rc=$?" | tee -a $OUT/summary.txt
timeout 20 $D/timing --test-threads 1 --nocapture > $OUT/timing.txt 2>&1; echo "timing rc=$?" | tee -a $OUT/summary.txt
for f in qkv_prep gather argmax lm_head_logits; do
  for b in before after; do
    bin=$D/switchyard; [ $b = before ] && bin=$D/switchyard-before
    s=$(date +%s)
    timeout 60 $bin bench --backend wgpu --iters 10 --filter $f > $OUT/bench_${f}_$b.md 2>&1
    echo "bench $f $b rc=$? $(( $(date +%s) - s ))s" | tee -a $OUT/summary.txt
  done
done
grep -h "^| [a-z]" $OUT/bench_*.md | grep -v "| kernel |" >> $OUT/summary.txt
