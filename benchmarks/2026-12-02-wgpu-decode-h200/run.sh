#!/usr/bin/env bash
# issue 14 item 3, fourth session: wgpu decode kernels (attention_decode,
# fused-norm and gated m = 1 GEMVs) against the build before them, cuda as
# the yardstick, one device call. Binaries (stripped, xz) in dist-wgpudec/:
#   switchyard-base  c51c35b (before)
#   switchyard-a     5a8803a + the working tree at 18:52 (what is committed)
#   switchyard-b     a + variant_b_m1u16.patch (16 loads a lane a round at 2048 < K <= 4096)
set -u
D=./dist-wgpudec
source .device-vk/env.sh
export SWITCHYARD_REQUIRE_CUDA=1
for v in base a b; do xz -dc $D/switchyard-$v.xz > /tmp/sy-$v && chmod +x /tmp/sy-$v; done
Z=/tmp/sy-base; A=/tmp/sy-a; B=/tmp/sy-b
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $S
t() { local name=$1; shift; local s=$(date +%s); timeout "$@" > $OUT/$name 2>&1; echo "$name: rc=$? ($(( $(date +%s) - s )) s)" >> $S; }
t parity_wgpu_a.md 60 $A parity --backend wgpu
tail -1 $OUT/parity_wgpu_a.md >> $S
t bm_cuda_a.md 40 $A bench-model --backend cuda --batch 1 --steps 32
t bm_wgpu_base.md 40 $Z bench-model --backend wgpu --batch 1 --steps 16 --profile-timed-steps
t bm_wgpu_a.md 40 $A bench-model --backend wgpu --batch 1 --steps 16 --profile-timed-steps
t bm_wgpu_b.md 40 $B bench-model --backend wgpu --batch 1 --steps 16 --profile-timed-steps
# Second round, alternating, no profile: the tok/s spread.
for r in 2 3; do
  t bm_r${r}_cuda_a.md 30 $A bench-model --backend cuda --batch 1 --steps 32
  t bm_r${r}_wgpu_base.md 30 $Z bench-model --backend wgpu --batch 1 --steps 16
  t bm_r${r}_wgpu_a.md 30 $A bench-model --backend wgpu --batch 1 --steps 16
  t bm_r${r}_wgpu_b.md 30 $B bench-model --backend wgpu --batch 1 --steps 16
done
t bench_attn_a.md 40 $A bench --backend wgpu --iters 10 --filter attention_decode
t bench_attn_base.md 40 $Z bench --backend wgpu --iters 10 --filter attention_decode
t bench_gemv_a.md 50 $A bench --backend wgpu --iters 10 --filter dense_gemv
t bench_gemv_b.md 50 $B bench --backend wgpu --iters 10 --filter dense_gemv
t bench_gemv_base.md 50 $Z bench --backend wgpu --iters 10 --filter dense_gemv
echo "== tok/s (batch 1)" >> $S
for f in $OUT/bm_*.md; do echo "$(basename $f): $(grep '^| 1 |' $f | cut -d'|' -f3)" >> $S; done
for v in base a b; do
  echo "== profile $v" >> $S
  grep -E "^batch 1: GPU|^\| (dense|attention|post_norm|layer_out|qkv|lm_head)" $OUT/bm_wgpu_$v.md >> $S
done
cat $S
