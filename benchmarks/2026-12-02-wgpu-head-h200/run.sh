#!/bin/bash
# One device call (timeout 150 s): parity of lm_head_logits_bf16 and argmax_rows on
# wgpu (Vulkan) at every variant the plans can pick, then the before / after benches
# back to back. `after` variants: SWITCHYARD_WGSL_HEAD_ORDER / _STEPS (the bf16 head's
# walk: rows side by side or one after the other, loads in flight) and
# SWITCHYARD_WGSL_ARGMAX_VECS (argmax first-pass vectors an invocation).
cd "$(dirname "$0")/../.."
source .device-vk/env.sh
D=dist-wgpuhead
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
for f in switchyard switchyard-before; do xz -d -k -f $D/$f.xz && chmod +x $D/$f; done
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
par lm_head_logits_bf16
par lm_head_logits_bf16 SWITCHYARD_WGSL_HEAD_ORDER=0 SWITCHYARD_WGSL_HEAD_STEPS=1
par lm_head_logits_bf16 SWITCHYARD_WGSL_HEAD_ORDER=0 SWITCHYARD_WGSL_HEAD_STEPS=4
par lm_head_logits_bf16 SWITCHYARD_WGSL_HEAD_ORDER=1 SWITCHYARD_WGSL_HEAD_STEPS=1
par lm_head_logits_bf16 SWITCHYARD_WGSL_HEAD_ORDER=1 SWITCHYARD_WGSL_HEAD_STEPS=2
par argmax_rows
par argmax_rows SWITCHYARD_WGSL_ARGMAX_VECS=8
par argmax_rows SWITCHYARD_WGSL_ARGMAX_VECS=16
par argmax_rows SWITCHYARD_WGSL_ARGMAX_VECS=16 SWITCHYARD_WGPU_SUBGROUPS=0
bench() { # label bin filter [env...]
  local label=$1 bin=$2 f=$3; shift 3
  env "$@" timeout 40 $D/$bin bench --backend wgpu --iters 10 --filter $f > /tmp/bench_one.txt 2>&1
  local rc=$?
  { echo "### $bin --filter $f $*"; cat /tmp/bench_one.txt; } >> $OUT/bench_$label.txt
  echo "bench $label $bin $f $* rc=$rc t=$(el)" | tee -a $S
  grep -h "copy ceiling\|^| [a-z]" /tmp/bench_one.txt | grep -v "^| kernel" | sed "s/^/  [$label $*] /" >> $S
}
bench argmax switchyard-before argmax_rows
for v in 4 8 16; do bench argmax switchyard argmax_rows SWITCHYARD_WGSL_ARGMAX_VECS=$v; done
bench head switchyard-before lm_head_logits_bf16
for w in 0:1 0:2 1:1 1:2 0:4; do
  [ $(el) -lt 122 ] && bench head switchyard lm_head_logits_bf16 SWITCHYARD_WGSL_HEAD_ORDER=${w%:*} SWITCHYARD_WGSL_HEAD_STEPS=${w#*:}
done
# Repeats, time allowing: the argmax order reversed, then the head's before.
[ $(el) -lt 125 ] && { for v in 16 8; do bench argmax_rep switchyard argmax_rows SWITCHYARD_WGSL_ARGMAX_VECS=$v; done; bench argmax_rep switchyard-before argmax_rows; }
[ $(el) -lt 128 ] && bench head_rep switchyard-before lm_head_logits_bf16
echo "done t=$(el)" | tee -a $S
