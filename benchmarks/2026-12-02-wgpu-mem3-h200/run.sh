#!/bin/bash
# One device call (timeout 150 s), run from the repository root as
# `bash dist-h3/run.sh` (carry dist-h3 and .device-vk): wgpu (Vulkan) parity
# of layer_out, the gathers and the sandwich at the default and at every
# variant, then a process per bench row and variant, in alternating rounds:
# - layer_out_bf16: SWITCHYARD_WGSL_LAYER_OUT=1 (before: four slots), 2 (slots
#   fitted to the row), 3 (+ mid loaded with x), 4 (+ mid loaded after the
#   reduction, before any store), 5 (+ layer_scalar read after the reduction);
# - embed_gather_bf16, SWITCHYARD_BENCH_GATHER_DIAG=fill: the same kernel over
#   44 MB and 2.8 GB tables left as allocated, written with zeros, or random;
#   the random 2.8 GB table with ids confined to 44 MB and 264 MB; then =fill2
#   (the two random-table rows) at SWITCHYARD_WGSL_GATHER_FIT=1 (three slots)
#   and the RPG overrides;
# - gather_rows_bf16 bench row, FIT=1 against the default;
# - embed_gather_fp8 bench row at RPG 2 (default), 3, 4.
# The LAYER_OUT and GATHER_FIT switches existed only in the measured build
# (README.md); the committed plans are LAYER_OUT=2 and GATHER_FIT=1.
cd "$(dirname "$0")/.."
source .device-vk/env.sh
D=dist-h3
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
for f in switchyard split_tables; do xz -d -k -f $D/$f.xz && chmod +x $D/$f; done
export SWITCHYARD_REQUIRE_WGPU=1
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv > $OUT/gpu.txt 2>&1
par() { # filter [env...]
  local f=$1; shift
  env "$@" timeout 30 $D/switchyard parity --backend wgpu --filter $f > /tmp/par_one.txt 2>&1
  local rc=$?
  { echo "### parity $f $*"; cat /tmp/par_one.txt; } >> $OUT/parity.txt
  echo "parity $f $* rc=$rc $(grep -h 'passed' /tmp/par_one.txt | tail -1) t=$(el)" | tee -a $S
}
par layer_out
par gather
par post_norm
for v in 2 3 4 5; do par layer_out SWITCHYARD_WGSL_LAYER_OUT=$v; done
par gather SWITCHYARD_WGSL_GATHER_FIT=1
par embed_gather_fp8 SWITCHYARD_WGSL_GATHER_RPG=3
# bench: label filter [env...]; one line a case: GPU ms, GPU GB/s, % of the same process's copy ceiling
bench() {
  local label=$1 f=$2; shift 2
  env "$@" timeout 40 $D/switchyard bench --backend wgpu --iters 10 --filter $f > /tmp/bench_one.txt 2>&1
  local rc=$?
  { echo "### --filter $f $*"; cat /tmp/bench_one.txt; } >> $OUT/bench_$label.txt
  local ceil=$(grep -h "copy ceiling" /tmp/bench_one.txt | sed 's/.*copy ceiling: \([0-9.]*\) GB.*/\1/')
  grep -h "^| [a-z]" /tmp/bench_one.txt | grep -v "^| kernel" | awk -F'|' -v c="$ceil" -v tag="$label $*" -v rc=$rc -v t=$(el) \
    '{g=$9+0; printf "%-52s %-18s %-52s GPU ms %s  GPU GB/s %7.1f  copy %s  = %5.1f%%  rc=%s t=%s\n", tag, $2, $3, $6, g, c, (c>0?100*g/c:0), rc, t}' | tee -a $S
}
for r in 1 2 3; do
  echo "--- layer_out round $r t=$(el)" | tee -a $S
  for v in 1 2 3 4 5; do bench layer_out layer_out SWITCHYARD_WGSL_LAYER_OUT=$v; done
done
echo "--- gather fill t=$(el)" | tee -a $S
bench fill embed_gather_bf16 SWITCHYARD_BENCH_GATHER_DIAG=fill
for r in 1 2; do
  bench fill2 embed_gather_bf16 SWITCHYARD_BENCH_GATHER_DIAG=fill2 SWITCHYARD_WGSL_GATHER_FIT=1
  bench fill2 embed_gather_bf16 SWITCHYARD_BENCH_GATHER_DIAG=fill2
done
for r in 1 2; do
  [ $r -eq 2 ] && [ $(el) -gt 100 ] && break
  echo "--- gather_rows / fp8 round $r t=$(el)" | tee -a $S
  bench rows gather_rows
  bench rows gather_rows SWITCHYARD_WGSL_GATHER_FIT=1
  for g in 2 3 4; do bench fp8 embed_gather_fp8 SWITCHYARD_WGSL_GATHER_RPG=$g; done
done
for g in 1 4 8; do [ $(el) -lt 120 ] && bench fill2 embed_gather_bf16 SWITCHYARD_BENCH_GATHER_DIAG=fill2 SWITCHYARD_WGSL_GATHER_RPG=$g; done
[ $(el) -lt 130 ] && { SWITCHYARD_WGSL_GATHER_FIT=1 timeout $(( 145 - $(el) )) $D/split_tables --test-threads 1 small_tables > $OUT/tests.txt 2>&1; echo "split_tables small_tables FIT=1 rc=$? t=$(el)" | tee -a $S; }
grep -h "test result" $OUT/tests.txt 2>/dev/null >> $S
echo "end t=$(el)" | tee -a $S
