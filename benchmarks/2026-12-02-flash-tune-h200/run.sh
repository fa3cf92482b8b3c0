#!/bin/bash
# Issue 13 item 4, flash prefill at hd 256: one H200 call.
# A = attn_bench of the committed kernel (dbf0593: 64-key tiles, 2 stages; the
#     fifth session's dist-flash/attn_bench-C, same kernel source),
# B = ex2.ftz, FFMA-folded exp2, rescale skip, packed V-row max + bf16x2
#     scaling, cp.async at immediate offsets, shift/mask page lookup,
# U = B + the Q.K^T k-loop fully unrolled,
# I = U + tile t+1's V conversion interleaved with tile t's P.V MMAs.
# Phase 1 (concurrent, correctness): parity --filter attention_prefill for I
# and U (CLI, replay identity), compute-sanitizer memcheck + racecheck of both.
# Phase 2 (one at a time, timing): attn_bench A, attn_sdpa.py (SDPA's flash
# backend), attn_bench B, U, I, then A and I again (drift check), then ncu on
# I's hd 256 kernel with what time is left.
D=/tmp/df2
mkdir -p $D $OUT/logs
for f in attn_bench-A attn_bench-B attn_bench-U attn_bench-I switchyard-U switchyard-I; do xz -dc dist-flash2/$f.xz > $D/$f & done
wait
chmod +x $D/*
export SWITCHYARD_REQUIRE_CUDA=1
export SWITCHYARD_CUDA_CACHE=/tmp/sy-cubins
S=$(date +%s)
el() { echo $(( $(date +%s) - S )); }
L=$OUT/logs
step() { local name=$1 t=$2; shift 2; echo "== $name start $(el)s" >> $L/steps.txt; timeout $t "$@" > $L/$name.txt 2>&1; local rc=$?; echo "rc=$rc" >> $L/$name.txt; echo "== $name rc=$rc end $(el)s" >> $L/steps.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/smi.txt 2>&1
P="parity --backend cuda --filter attention_prefill"
step parity_I 90 $D/switchyard-I $P &
step parity_U 90 $D/switchyard-U $P &
step memcheck_I 100 compute-sanitizer --tool memcheck $D/switchyard-I $P &
step racecheck_I 110 compute-sanitizer --tool racecheck $D/switchyard-I $P &
step memcheck_U 100 compute-sanitizer --tool memcheck $D/switchyard-U $P &
step racecheck_U 110 compute-sanitizer --tool racecheck $D/switchyard-U $P &
wait
step bench_A 30 $D/attn_bench-A
step sdpa 30 python3 backend-cuda/examples/attn_sdpa.py
step bench_B 30 $D/attn_bench-B
step bench_U 30 $D/attn_bench-U
step bench_I 30 $D/attn_bench-I
step bench_A2 30 $D/attn_bench-A
step bench_I2 30 $D/attn_bench-I
R=$(( 185 - $(el) ))
if [ $R -gt 15 ]; then
  step ncu_I $R ncu --clock-control none --section SpeedOfLight --section WarpStateStats --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_hmma.sum,smsp__inst_executed.sum,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio -k regex:attention_prefill_flash_hd256 -c 1 $D/attn_bench-I
fi
echo "== done $(el)s" >> $L/steps.txt
{
cat $L/steps.txt
for f in parity_I parity_U memcheck_I racecheck_I memcheck_U racecheck_U; do echo "-- $f"; grep -E "passed|SUMMARY|fail" $L/$f.txt | tail -3; done
echo "-- NMSE of the attention_prefill rows (largest), I and U"
for f in parity_I parity_U; do grep -E "^\| attention_prefill" $L/$f.txt | awk -F'|' '{print $6}' | sort -g | tail -1; done
for f in bench_A bench_B bench_U bench_I bench_A2 bench_I2; do echo "-- $f"; grep -E "^\| nh=32 nkv=(16|4) hd=(256|512)( k=v)? \| 4096" $L/$f.txt; grep -E "^\| nh=.*rows=402" $L/$f.txt; done
grep -E "SDPA" $L/sdpa.txt
grep -E "hmma|inst_executed|Throughput|Warp Cycles|Issued|stalled|Duration" $L/ncu_I.txt 2>/dev/null
} > $OUT/summary.txt
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
cat $OUT/summary.txt
