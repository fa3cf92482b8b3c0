#!/bin/bash
# One device call (timeout 150 s): parity of the bf16 gathers' two-window pass on wgpu (Vulkan),
# the bench cases with one window a pass (before) and two (after) back to back, the diagnostic
# cases (tables 44 MB..2.8 GB, id patterns, RPG), then split_tables and vec4_paths.
cd "$(dirname "$0")/../.."
source .device-vk/env.sh
D=dist-wgpuembed
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
for f in switchyard split_tables vec4_paths; do xz -d -k -f $D/$f.xz && chmod +x $D/$f; done
export SWITCHYARD_REQUIRE_WGPU=1
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv > $OUT/gpu.txt 2>&1
for v in X=0 SWITCHYARD_WGSL_GATHER_WINDOWS=1; do
  for f in embed_gather gather_rows; do
    env $v timeout 20 $D/switchyard parity --backend wgpu --filter $f >> $OUT/parity.txt 2>&1
    echo "parity $f $v rc=$? $(grep -h 'passed' $OUT/parity.txt | tail -1) t=$(el)" | tee -a $S
  done
done
bench() { # label filter [env...]
  local label=$1 f=$2; shift 2
  env "$@" timeout 40 $D/switchyard bench --backend wgpu --iters 10 --filter $f > /tmp/bench_one.txt 2>&1
  local rc=$?
  { echo "### --filter $f $*"; cat /tmp/bench_one.txt; } >> $OUT/bench_$label.txt
  echo "bench $label $f $* rc=$rc t=$(el)" | tee -a $S
  grep -h "copy ceiling\|^| [a-z]" /tmp/bench_one.txt | grep -v "^| kernel" | sed "s/^/  [$label $*] /" >> $S
}
bench before embed_gather_bf16 SWITCHYARD_WGSL_GATHER_WINDOWS=1
bench after gather
bench diag gather SWITCHYARD_BENCH_GATHER_DIAG=only
timeout 25 $D/split_tables --test-threads 1 small_tables > $OUT/tests.txt 2>&1; echo "split_tables small_tables rc=$? t=$(el)" | tee -a $S
timeout 15 $D/split_tables --test-threads 1 unaligned >> $OUT/tests.txt 2>&1; echo "split_tables unaligned rc=$? t=$(el)" | tee -a $S
[ $(el) -lt 95 ] && bench diag embed_gather_bf16 SWITCHYARD_BENCH_GATHER_DIAG=only SWITCHYARD_WGSL_GATHER_WINDOWS=1
[ $(el) -lt 95 ] && bench diag embed_gather SWITCHYARD_BENCH_GATHER_DIAG=only SWITCHYARD_WGSL_GATHER_RPG=1
[ $(el) -lt 95 ] && { timeout $(( 146 - $(el) )) $D/split_tables --test-threads 1 past_one_binding >> $OUT/tests.txt 2>&1; echo "split_tables past_one_binding rc=$? t=$(el)" | tee -a $S; }
for r in 4 8; do [ $(el) -lt 130 ] && bench diag embed_gather SWITCHYARD_BENCH_GATHER_DIAG=only SWITCHYARD_WGSL_GATHER_RPG=$r; done
[ $(el) -lt 135 ] && { timeout $(( 147 - $(el) )) $D/vec4_paths --test-threads 1 gathers >> $OUT/tests.txt 2>&1; echo "vec4_paths gathers rc=$? t=$(el)" | tee -a $S; }
grep -h "test result\|^test \|windows \[" $OUT/tests.txt | head -20 >> $S
