#!/bin/bash
# Issue 13 item 4, f16 P·V flash prefill: one H200 call.
# Phase 1 (concurrent, correctness): parity --filter attention_prefill for the
# committed build A and the two tuning variants (B: hd 256 at 4 stages, C: hd 256
# at 64-key tiles, 2 stages), compute-sanitizer memcheck and racecheck over A's.
# Phase 2 (one at a time, timing): attn_bench A, attn_sdpa.py, attn_bench B, C;
# then ncu on A's hd 256 kernel with what time is left.
D=/tmp/df
mkdir -p $D
for f in switchyard-A attn_bench-A gpu-B attn_bench-B gpu-C attn_bench-C; do xz -dc dist-flash/$f.xz > $D/$f & done
wait
chmod +x $D/*
export SWITCHYARD_REQUIRE_CUDA=1
S=$(date +%s)
el() { echo $(( $(date +%s) - S )); }
step() { local name=$1 t=$2; shift 2; echo "== $name start $(el)s" >> $OUT/summary.txt; timeout $t "$@" > $OUT/$name.txt 2>&1; local rc=$?; echo "rc=$rc" >> $OUT/$name.txt; echo "== $name rc=$rc end $(el)s" >> $OUT/summary.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/smi.txt 2>&1
# phase 1 (one cubin cache: entries are written by rename). B and C have no CLI
# build (other crates were mid-edit): backend-cuda's gpu test runs every parity
# case on cuda; only the attention_prefill rows are read.
export SWITCHYARD_CUDA_CACHE=/tmp/sy-cubins
step parity 60 $D/switchyard-A parity --backend cuda --filter attention_prefill &
step parity_B 80 $D/gpu-B parity_with_the_cpu_reference &
step parity_C 80 $D/gpu-C parity_with_the_cpu_reference &
step memcheck 80 compute-sanitizer --tool memcheck $D/switchyard-A parity --backend cuda --filter attention_prefill &
step racecheck 95 compute-sanitizer --tool racecheck $D/switchyard-A parity --backend cuda --filter attention_prefill &
wait
# phase 2
step bench 70 $D/attn_bench-A
step sdpa 40 python3 backend-cuda/examples/attn_sdpa.py
step bench_B 25 $D/attn_bench-B
step bench_C 25 $D/attn_bench-C
R=$(( 212 - $(el) ))
if [ $R -gt 15 ]; then
  step ncu $R ncu --section SpeedOfLight --section WarpStateStats --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_hmma.sum,smsp__inst_executed.sum -k regex:attention_prefill_flash_hd256 -c 1 $D/attn_bench-A
fi
echo "== done $(el)s" >> $OUT/summary.txt
cat $OUT/summary.txt
for f in parity memcheck racecheck; do echo "-- $f"; grep -E "passed|SUMMARY|fail" $OUT/$f.txt | tail -3; done
for f in parity_B parity_C; do echo "-- $f (attention_prefill rows by result)"; grep -E "^\| attention_prefill" $OUT/$f.txt | awk -F'|' '{print $(NF-1)}' | sort | uniq -c; grep -E "^\| attention_prefill" $OUT/$f.txt | awk -F'|' '{print $6}' | sort -g | tail -1; done
for f in bench bench_B bench_C; do echo "-- $f"; grep -E "^\| nh=32 nkv=(16|4) hd=(256|512)( k=v)? \| 4096" $OUT/$f.txt; done
cat $OUT/sdpa.txt
