#!/bin/bash
# Part of the team's final device call (issue 14 item 2, wgpu norms and
# qkv_prep, eighth session): run from the repo root with .device-vk/env.sh
# sourced, the switchyard binary at $BIN, outputs under $PART_OUT; 60 s at
# most (every step under `timeout`, none started past 48 s).
# 1. wgpu parity of every variant to keep (replay identical expected):
#    SWITCHYARD_WGSL_NORM_PLAN=r2|pipe|early (pipe's walking shader at
#    SWITCHYARD_WGSL_NORM_PIPE=16 rows a workgroup; 8 differs only in the
#    grid), SWITCHYARD_WGSL_QKV_PAIR=1. lavapipe ran each with subgroups
#    on and off before the commit.
# 2. Two rounds of benches, default and each variant back to back, a
#    process each (the `norm` filter: rmsnorm and the sandwich; early runs
#    for layer_out only, rmsnorm has no late operand): GPU ms by timestamp
#    queries, % of the copy_u32 ceiling that the same process measured.
mkdir -p "$PART_OUT"
export SWITCHYARD_REQUIRE_WGPU=1
S=$PART_OUT/summary.txt
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
late() { [ "$(el)" -ge 48 ]; }
par() { # filter [env...]
  local f=$1; shift
  late && { echo "skip parity $f $* (t=$(el))" | tee -a $S; return; }
  env "$@" timeout 10 "$BIN" parity --backend wgpu --filter $f > $PART_OUT/par_one.txt 2>&1
  local rc=$?
  { echo "### parity $f $* rc=$rc"; cat $PART_OUT/par_one.txt; } >> $PART_OUT/parity.txt
  echo "parity $f $* rc=$rc $(grep -h 'passed' $PART_OUT/par_one.txt | tail -1) t=$(el)" | tee -a $S
}
bench() { # label filter [env...]
  local label=$1 f=$2; shift 2
  late && { echo "skip bench $f $* (t=$(el))" | tee -a $S; return; }
  env "$@" timeout 7 "$BIN" bench --backend wgpu --iters 10 --filter $f > $PART_OUT/bench_one.txt 2>&1
  local rc=$?
  { echo "### bench $label --filter $f $* rc=$rc"; cat $PART_OUT/bench_one.txt; } >> $PART_OUT/bench.txt
  local ceil=$(grep -h "copy ceiling" $PART_OUT/bench_one.txt | sed 's/.*copy ceiling: \([0-9.]*\) GB.*/\1/')
  grep -h "^| [a-z]" $PART_OUT/bench_one.txt | grep -v "^| kernel" | awk -F'|' -v c="$ceil" -v tag="$label $*" -v rc=$rc \
    '{g=$9+0; printf "%-44s %-28s %-24s GPU ms %s GPU GB/s %7.1f copy %s = %5.1f%% rc=%s\n", tag, $2, $3, $6, g, c, (c>0?100*g/c:0), rc}' | tee -a $S
}
par norm SWITCHYARD_WGSL_NORM_PLAN=r2
par norm SWITCHYARD_WGSL_NORM_PLAN=pipe SWITCHYARD_WGSL_NORM_PIPE=16
par norm SWITCHYARD_WGSL_NORM_PLAN=early
par qkv_prep SWITCHYARD_WGSL_QKV_PAIR=1
for round in 1 2; do
  echo "--- round $round t=$(el)" | tee -a $S
  bench default norm
  bench r2 norm SWITCHYARD_WGSL_NORM_PLAN=r2
  bench pipe8 norm SWITCHYARD_WGSL_NORM_PLAN=pipe SWITCHYARD_WGSL_NORM_PIPE=8
  bench pipe16 norm SWITCHYARD_WGSL_NORM_PLAN=pipe SWITCHYARD_WGSL_NORM_PIPE=16
  bench default layer_out
  bench early layer_out SWITCHYARD_WGSL_NORM_PLAN=early
  bench r2 layer_out SWITCHYARD_WGSL_NORM_PLAN=r2
  bench pipe8 layer_out SWITCHYARD_WGSL_NORM_PLAN=pipe SWITCHYARD_WGSL_NORM_PIPE=8
  bench pipe16 layer_out SWITCHYARD_WGSL_NORM_PLAN=pipe SWITCHYARD_WGSL_NORM_PIPE=16
  bench default qkv_prep
  bench pair qkv_prep SWITCHYARD_WGSL_QKV_PAIR=1
done
rm -f $PART_OUT/par_one.txt $PART_OUT/bench_one.txt
echo "end t=$(el)" | tee -a $S
