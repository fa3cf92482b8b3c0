#!/bin/bash
# Issue 13 item 4, flash prefill hd 256 on sm_90a (wgmma): the second H200 call.
# One build, three forms by SWITCHYARD_FLASH3_PREFILL:
#   V (unset)  = attention_prefill_flash3ov_hd256 (softmax of tile t beside P.V of t-1),
#   S=serial   = attention_prefill_flash3_hd256 (each product waited for in turn),
#   O=0        = the committed mma.sync kernel of flash_prefill.cu.
# Phase 1 (concurrent): parity --filter attention_prefill for V and S (replay
#   identity), compute-sanitizer memcheck + racecheck of both, and one attn_bench
#   run that only warms the module cache (output kept, not used).
# Phase 2 (one at a time): attn_bench V, attn_sdpa.py, attn_bench S, O, V again;
#   then ncu on V's kernel with what time is left.
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
step warm 45 $D/attn_bench &
step parity_V 50 $D/switchyard $P &
SWITCHYARD_FLASH3_PREFILL=serial step parity_S 50 $D/switchyard $P &
sleep 4
step memcheck_V 60 compute-sanitizer --tool memcheck $D/switchyard $P &
step racecheck_V 60 compute-sanitizer --tool racecheck $D/switchyard $P &
SWITCHYARD_FLASH3_PREFILL=serial step memcheck_S 60 compute-sanitizer --tool memcheck $D/switchyard $P &
SWITCHYARD_FLASH3_PREFILL=serial step racecheck_S 60 compute-sanitizer --tool racecheck $D/switchyard $P &
wait
step bench_V 25 $D/attn_bench
step sdpa 20 python3 backend-cuda/examples/attn_sdpa.py
SWITCHYARD_FLASH3_PREFILL=serial step bench_S 25 $D/attn_bench
SWITCHYARD_FLASH3_PREFILL=0 step bench_O 25 $D/attn_bench
step bench_V2 25 $D/attn_bench
R=$(( ${BUDGET:-140} - $(el) ))
if [ $R -gt 12 ]; then
  step ncu_V $R ncu --clock-control none --section SpeedOfLight --section WarpStateStats --metrics sm__inst_executed_pipe_tensor_op_gmma.sum,smsp__inst_executed.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed -k regex:attention_prefill_flash3 -c 1 $D/attn_bench
fi
echo "== done $(el)s" >> $L/steps.txt
{
cat $L/steps.txt
for f in parity_V parity_S memcheck_V racecheck_V memcheck_S racecheck_S; do echo "-- $f"; grep -aE "passed|SUMMARY|FAIL|fail" $L/$f.txt | tail -3; done
echo "-- largest NMSE of the hd 256 rows, V and S"
for f in parity_V parity_S; do grep -aE "^\| attention_prefill .*hd=256" $L/$f.txt | awk -F'|' '{print $6}' | sort -g | tail -1; done
for f in bench_V bench_S bench_O bench_V2; do echo "-- $f"; grep -aE "^\| nh=32 nkv=(16|4) hd=(256|512)( k=v)? \| 4096" $L/$f.txt; grep -aE "^\| nh=.*rows=402" $L/$f.txt; done
grep -aE "SDPA" $L/sdpa.txt
grep -aE "gmma|inst_executed|Throughput|Warp Cycles|Duration" $L/ncu_V.txt 2>/dev/null | head -20
} > $OUT/summary.txt
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
cat $OUT/summary.txt
