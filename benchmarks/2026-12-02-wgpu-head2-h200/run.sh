#!/bin/bash
# One device call (timeout 150 s), issue 14 item 2, helper hA: the bf16 head
# over two table windows in one pass, and where argmax_rows' two passes go.
# Here: cargo build --release -p switchyard-cli; strip, xz into dist-hA/
# (switchyard = this commit, switchyard-before = the commit before it).
# There (carry dist-hA and .device-vk): bash benchmarks/2026-12-02-wgpu-head2-h200/run.sh
#   parity wgpu --filter lm_head (default, HEAD_WINDOWS=1) and argmax (default,
#   VECS 1 / 2, no subgroups); parity cuda --filter argmax, lm_head;
#   bench wgpu --iters 5 --filter lm_head_logits_bf16 with HEAD_DIAG=1: two
#   windows a pass (default) against SWITCHYARD_WGSL_HEAD_WINDOWS=1, each in its
#   own process, and the bf16 head's KSPLIT 2 / 4 (workgroups of 16 / 8 rows);
#   argmax_rows with ARGMAX_DIAG=1 at VECS 4 (default) / 2 / 1, first.
cd "$(dirname "$0")/../.."
source .device-vk/env.sh
D=dist-hA
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
for f in switchyard switchyard-before; do xz -d -k -f $D/$f.xz && chmod +x $D/$f; done
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv > $OUT/gpu.txt 2>&1
par() { # backend filter [env...]
  local b=$1 f=$2; shift 2
  env SWITCHYARD_REQUIRE_WGPU=1 "$@" timeout 40 $D/switchyard parity --backend $b --filter $f > /tmp/par_one.txt 2>&1
  local rc=$?
  { echo "### parity $b $f $*"; cat /tmp/par_one.txt; } >> $OUT/parity.txt
  echo "parity $b $f $* rc=$rc $(grep -h 'passed' /tmp/par_one.txt | tail -1) t=$(el)" | tee -a $S
}
par wgpu lm_head
par wgpu lm_head SWITCHYARD_WGSL_HEAD_WINDOWS=1
par wgpu lm_head SWITCHYARD_WGSL_HEAD_KSPLIT=2
par wgpu lm_head SWITCHYARD_WGSL_HEAD_KSPLIT=4
par wgpu argmax
par wgpu argmax SWITCHYARD_WGSL_ARGMAX_VECS=2
par wgpu argmax SWITCHYARD_WGSL_ARGMAX_VECS=1
par wgpu argmax SWITCHYARD_WGPU_SUBGROUPS=0
par cuda argmax
par cuda lm_head
bench() { # label bin filter [env...]
  local label=$1 bin=$2 f=$3; shift 3
  env SWITCHYARD_REQUIRE_WGPU=1 "$@" timeout 40 $D/$bin bench --backend wgpu --iters 5 --filter $f > /tmp/bench_one.txt 2>&1
  local rc=$?
  { echo "### $bin --filter $f $*"; cat /tmp/bench_one.txt; } >> $OUT/bench_$label.txt
  echo "bench $label $bin $f $* rc=$rc t=$(el)" | tee -a $S
  grep -h "copy ceiling\|^| [a-z]" /tmp/bench_one.txt | grep -v "^| kernel" | sed "s/^/  [$label $bin $*] /" >> $S
}
bench argmax switchyard argmax_rows SWITCHYARD_BENCH_ARGMAX_DIAG=1
bench argmax switchyard argmax_rows SWITCHYARD_BENCH_ARGMAX_DIAG=1 SWITCHYARD_WGSL_ARGMAX_VECS=2
bench argmax switchyard argmax_rows SWITCHYARD_BENCH_ARGMAX_DIAG=1 SWITCHYARD_WGSL_ARGMAX_VECS=1
bench head switchyard lm_head_logits_bf16 SWITCHYARD_BENCH_HEAD_DIAG=1
bench head switchyard lm_head_logits_bf16 SWITCHYARD_WGSL_HEAD_WINDOWS=1
[ $(el) -lt 100 ] && bench head switchyard lm_head_logits_bf16 SWITCHYARD_WGSL_HEAD_KSPLIT=2
[ $(el) -lt 110 ] && bench head switchyard lm_head_logits_bf16 SWITCHYARD_WGSL_HEAD_KSPLIT=4
# Repeats, time allowing: the argmax VECS in reverse order, the head's before binary.
[ $(el) -lt 135 ] && for v in 1 2 4; do bench argmax_rep switchyard argmax_rows SWITCHYARD_WGSL_ARGMAX_VECS=$v; done
[ $(el) -lt 110 ] && bench head_rep switchyard-before lm_head_logits_bf16
echo "done t=$(el)" | tee -a $S
