#!/bin/bash
# One device call (timeout 150 s): parity of qkv_prep and the norms on wgpu
# (Vulkan) at every variant, then before/after benches back to back and the
# env-switch variants (SWITCHYARD_WGSL_QKV_V / _LATE, SWITCHYARD_WGSL_NORM_RPW,
# SWITCHYARD_WGPU_SUBGROUPS=0), each bench a process of its own.
cd "$(dirname "$0")/../.."
source .device-vk/env.sh
D=dist-wgpunorm
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
for f in switchyard switchyard-before; do xz -d -k -f $D/$f.xz && chmod +x $D/$f; done
export SWITCHYARD_REQUIRE_WGPU=1
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv > $OUT/gpu.txt 2>&1
par() { # label filter [env...]
  local label=$1 f=$2; shift 2
  env "$@" timeout 30 $D/switchyard parity --backend wgpu --filter $f > /tmp/par_one.txt 2>&1
  local rc=$?
  { echo "### parity $f $*"; cat /tmp/par_one.txt; } >> $OUT/parity.txt
  echo "parity $f $* rc=$rc $(grep -h 'passed' /tmp/par_one.txt | tail -1) t=$(el)" | tee -a $S
}
par a qkv_prep
par a qkv_prep SWITCHYARD_WGSL_QKV_V=2
par a qkv_prep SWITCHYARD_WGSL_QKV_V=4 SWITCHYARD_WGSL_QKV_LATE=1
par a qkv_prep SWITCHYARD_WGPU_SUBGROUPS=0
for r in 1 2 4 8; do par a norm SWITCHYARD_WGSL_NORM_RPW=$r; done
par a norm SWITCHYARD_WGSL_NORM_RPW=8 SWITCHYARD_WGPU_SUBGROUPS=0
# bench: label bin filter [env...]; one line a case into the summary: GPU ms, GPU GB/s, % of the same process's copy ceiling
bench() {
  local label=$1 bin=$2 f=$3; shift 3
  env "$@" timeout 25 $D/$bin bench --backend wgpu --iters 10 --filter $f > /tmp/bench_one.txt 2>&1
  local rc=$?
  { echo "### $bin --filter $f $*"; cat /tmp/bench_one.txt; } >> $OUT/bench_$label.txt
  local ceil=$(grep -h "copy ceiling" /tmp/bench_one.txt | sed 's/.*copy ceiling: \([0-9.]*\) GB.*/\1/')
  grep -h "^| [a-z]" /tmp/bench_one.txt | grep -v "^| kernel" | awk -F'|' -v c="$ceil" -v tag="$label $bin $*" -v rc=$rc \
    '{g=$9+0; printf "%-58s %-30s %-34s GPU ms %s  GPU GB/s %7.1f  copy %s  = %5.1f%%  rc=%s\n", tag, $2, $3, $6, g, c, (c>0?100*g/c:0), rc}' | tee -a $S
}
echo "--- round 1 t=$(el)" | tee -a $S
for f in qkv_prep norm layer_out copy_u32; do
  bench before switchyard-before $f
  bench after switchyard $f
done
echo "--- qkv variants t=$(el)" | tee -a $S
bench qkv switchyard qkv_prep SWITCHYARD_WGPU_SUBGROUPS=0
for v in 2 4; do bench qkv switchyard qkv_prep SWITCHYARD_WGSL_QKV_V=$v; done
for v in 1 2 4; do bench qkv switchyard qkv_prep SWITCHYARD_WGSL_QKV_V=$v SWITCHYARD_WGSL_QKV_LATE=1; done
echo "--- norm variants t=$(el)" | tee -a $S
for r in 2 4 8; do for f in norm layer_out; do bench norm switchyard $f SWITCHYARD_WGSL_NORM_RPW=$r; done; done
for r in 1 8; do bench norm switchyard norm SWITCHYARD_WGSL_NORM_RPW=$r SWITCHYARD_WGPU_SUBGROUPS=0; done
echo "--- round 2 t=$(el)" | tee -a $S
for f in qkv_prep norm; do
  bench before switchyard-before $f
  bench after switchyard $f
done
[ $(el) -lt 120 ] && for r in 4 8; do bench norm switchyard norm SWITCHYARD_WGSL_NORM_RPW=$r; done
[ $(el) -lt 125 ] && for v in 2 4; do bench qkv switchyard qkv_prep SWITCHYARD_WGSL_QKV_V=$v SWITCHYARD_WGSL_QKV_LATE=1; done
echo "end t=$(el)" | tee -a $S
