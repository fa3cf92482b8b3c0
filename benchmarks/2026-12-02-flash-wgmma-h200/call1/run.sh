#!/bin/bash
# Issue 13 item 4, flash prefill hd 256 on sm_90a (wgmma): one H200 call.
# N = this build (attention_prefill_flash3_hd256 on by default on sm_90a);
# O = the same binary with SWITCHYARD_FLASH3_PREFILL=0 (the committed
#     mma.sync kernel of flash_prefill.cu), the A/B in one call.
# Phase 1 (concurrent): parity --filter attention_prefill (replay identity),
#   compute-sanitizer memcheck and racecheck over the same filter.
# Phase 2 (one at a time): attn_bench N, attn_sdpa.py, attn_bench O, N again,
#   then ncu on the new kernel with what time is left.
D=/tmp/df3
mkdir -p $D $OUT/logs
for f in attn_bench switchyard; do xz -dc dist-flash3/$f.xz > $D/$f & done
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
step parity 60 $D/switchyard $P &
sleep 3
step memcheck 70 compute-sanitizer --tool memcheck $D/switchyard $P &
step racecheck 70 compute-sanitizer --tool racecheck $D/switchyard $P &
wait
step bench_N 30 $D/attn_bench
step sdpa 25 python3 backend-cuda/examples/attn_sdpa.py
SWITCHYARD_FLASH3_PREFILL=0 step bench_O 30 $D/attn_bench
R=$(( ${BUDGET:-140} - $(el) ))
if [ $R -gt 12 ]; then
  step ncu_N $R ncu --clock-control none --section SpeedOfLight --section WarpStateStats --metrics sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_gmma.sum,smsp__inst_executed.sum -k regex:attention_prefill_flash3_hd256 -c 1 $D/attn_bench
fi
echo "== done $(el)s" >> $L/steps.txt
{
cat $L/steps.txt
for f in parity memcheck racecheck; do echo "-- $f"; grep -aE "passed|SUMMARY|fail|FAIL|replayed" $L/$f.txt | tail -4; done
echo "-- parity rows (attention_prefill)"; grep -aE "^\| attention_prefill" $L/parity.txt | cut -c1-200 | head -40
for f in bench_N bench_O; do echo "-- $f"; grep -aE "^\| nh=32 nkv=(16|4) hd=(256|512)( k=v)? \| 4096" $L/$f.txt; grep -aE "^\| .*edge|^\| nh=.*rows" $L/$f.txt | head -6; done
grep -aE "SDPA" $L/sdpa.txt
grep -aE "gmma|inst_executed|Throughput|Warp Cycles|Issued|Duration|Registers|stall" $L/ncu_N.txt 2>/dev/null | head -40
} > $OUT/summary.txt
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
cat $OUT/summary.txt
