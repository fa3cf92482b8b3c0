#!/bin/bash
# One device call (timeout 150 s): parity of the changed kernels on wgpu (Vulkan),
# before/after benches back to back, the RPG / UPG variants, then the vec4 and split-table tests.
cd "$(dirname "$0")/../.."
source .device-vk/env.sh
D=dist-wgpumem2
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
for f in switchyard switchyard-before vec4_paths split_tables; do xz -d -k -f $D/$f.xz && chmod +x $D/$f; done
export SWITCHYARD_REQUIRE_WGPU=1
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv > $OUT/gpu.txt 2>&1
for f in embed_gather gather_rows lm_head_logits_fp8 qkv_prep; do
  timeout 40 $D/switchyard parity --backend wgpu --filter $f >> $OUT/parity.txt 2>&1
  echo "parity $f rc=$? $(grep -h 'passed' $OUT/parity.txt | tail -1) t=$(el)" | tee -a $S
done
bench() { # label bin filter [env...]
  local label=$1 bin=$2 f=$3; shift 3
  env "$@" timeout 45 $D/$bin bench --backend wgpu --iters 10 --filter $f > /tmp/bench_one.txt 2>&1
  local rc=$?
  { echo "### $bin --filter $f $*"; cat /tmp/bench_one.txt; } >> $OUT/bench_$label.txt
  echo "bench $label $f $* rc=$rc t=$(el)" | tee -a $S
  grep -h "copy ceiling\|^| [a-z]" /tmp/bench_one.txt | grep -v "^| kernel" | sed "s/^/  [$label $*] /" >> $S
}
for f in gather qkv_prep lm_head_logits_fp8; do
  bench before switchyard-before $f
  bench after switchyard $f
done
for r in 1 2 8; do bench variants switchyard gather_rows SWITCHYARD_WGSL_GATHER_RPG=$r; done
for u in 1 2 8; do bench variants switchyard qkv_prep SWITCHYARD_WGSL_QKV_UPG=$u; done
[ $(el) -lt 105 ] && for r in 2 8; do bench variants switchyard embed_gather_fp8 SWITCHYARD_WGSL_GATHER_RPG=$r; done
timeout 20 $D/vec4_paths --test-threads 1 > $OUT/tests.txt 2>&1; echo "vec4_paths rc=$? t=$(el)" | tee -a $S
for v in "SWITCHYARD_WGSL_GATHER_RPG=8 SWITCHYARD_WGSL_QKV_UPG=2"; do
  [ $(el) -lt 115 ] && for f in gather qkv_prep; do
    env $v timeout 15 $D/switchyard parity --backend wgpu --filter $f >> $OUT/tests.txt 2>&1
    echo "parity $f $v rc=$? $(grep -h 'passed' $OUT/tests.txt | tail -1) t=$(el)" | tee -a $S
  done
done
[ $(el) -lt 120 ] && { timeout $(( 145 - $(el) )) $D/split_tables --test-threads 1 >> $OUT/tests.txt 2>&1; echo "split_tables rc=$? t=$(el)" | tee -a $S; }
grep -h "test result\|^test " $OUT/tests.txt | head -20 >> $S
