#!/usr/bin/env bash
# Final call of the ninth session (budget-bound: about 400 s). Correctness first:
# parity on cuda and wgpu (every case, replay identity), compute-sanitizer memcheck +
# racecheck over the CUDA families changed this session (gemv, attention_decode),
# the HF fixtures on cuda and wgpu. Then the timed parts: bench-model cuda batch 1
# and 16 and wgpu batch 1; the cluster-combine A/B (dist-final9/switchyard-nocombine
# = 7a06de5, the commit before it); the wgpu bf16 head repeat, alternating one pass
# over two windows (default) and SWITCHYARD_WGSL_HEAD_WINDOWS=1, a process each.
set -u
export OUT=${OUT:-/tmp/h200}
mkdir -p "$OUT"
START=$SECONDS
X=$OUT/final.txt
source .device-vk/env.sh
export SWITCHYARD_REQUIRE_CUDA=1 SWITCHYARD_REQUIRE_WGPU=1 SWITCHYARD_CUDA_CACHE=/tmp/sy-cubins
D=./dist-final9
S=$D/switchyard
N=$D/switchyard-nocombine
t() { echo "-- $((SECONDS - START)) s" >> $X; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $X
timeout 100 $S parity --backend cuda > $OUT/parity_cuda.txt 2>&1
echo "== parity cuda" >> $X; grep "passed\|FAIL" $OUT/parity_cuda.txt | tail -5 >> $X; t
san() { # tool filter
  timeout 90 compute-sanitizer --tool $1 $S parity --backend cuda --filter $2 >> $OUT/san_$1.txt 2>&1
  echo "rc=$? ($1 $2)" >> $OUT/san_$1.txt
}
for tool in memcheck racecheck; do ( san $tool gemv; san $tool attention_decode ) & done
echo "== parity wgpu" >> $X; timeout 120 $S parity --backend wgpu > $OUT/parity_wgpu.txt 2>&1; grep "passed\|FAIL" $OUT/parity_wgpu.txt | tail -5 >> $X; t
echo "== HF fixtures" >> $X
for be in cuda wgpu; do
  for fx in tiny-dense tiny-moe tiny-e2b tiny-e4b tiny-26b-a4b tiny-31b; do
    timeout 30 $S generate --model tests/fixtures/$fx --backend $be --prompt-ids 2,17,99,5,250,31 \
      --max-new-tokens 10 --ignore-eos --json > /tmp/$fx.$be.json 2>>$OUT/model_err.txt
    python3 scripts/compare_fixture.py tests/fixtures/$fx/expected.json /tmp/$fx.$be.json "$fx on $be vs HF" | tail -1 >> $X
  done
done; t
wait
echo "== sanitizers (gemv, attention_decode)" >> $X
for tool in memcheck racecheck; do grep -E "^cuda: |SUMMARY|^rc=" $OUT/san_$tool.txt | sed "s/^/$tool: /" >> $X; done; t
bm() { local tag=$1 bin=$2; shift 2; timeout 45 $bin bench-model "$@" 2>&1 | grep "^| [0-9]" | sed "s/^/$tag /" >> $X; }
echo "== bench-model" >> $X
bm "cuda default" $S --backend cuda --batch 1,16 --steps 32
bm "wgpu default" $S --backend wgpu --batch 1 --steps 16
bm "cuda default (again)" $S --backend cuda --batch 1 --steps 32; t
echo "== cluster combine A/B: nocombine (7a06de5) vs final" >> $X
for r in 1 2; do
  bm "nocombine r$r" $N --backend cuda --batch 1 --steps 32
  bm "final r$r" $S --backend cuda --batch 1 --steps 32
done
for v in nocombine final; do
  bin=$S; [ $v = nocombine ] && bin=$N
  timeout 30 $bin bench --backend cuda --iters 10 --filter attention_decode > $OUT/bench_attn_$v.txt 2>&1
  grep "^| attention" $OUT/bench_attn_$v.txt | grep "b=1 " | awk -F'|' -v v=$v '{print v, $3, $4, $10}' >> $X
done; t
echo "== wgpu bf16 head: two windows a pass (default) vs SWITCHYARD_WGSL_HEAD_WINDOWS=1, alternating, HEAD_DIAG=1" >> $X
for r in 1 2; do
  for w in default 1; do
    if [ $w = default ]; then e=X=0; else e=SWITCHYARD_WGSL_HEAD_WINDOWS=1; fi
    env $e SWITCHYARD_BENCH_HEAD_DIAG=1 timeout 40 $S bench --backend wgpu --iters 5 --filter lm_head_logits_bf16 > /tmp/h.txt 2>&1
    cat /tmp/h.txt >> $OUT/bench_head.txt
    grep -E "copy ceiling|^\| lm_head_logits_bf16 \| m=1 " /tmp/h.txt | sed "s/^/r$r windows=$w: /" | cut -c1-220 >> $X
  done
done; t
cd $OUT && tar czf raw.tgz parity_*.txt san_*.txt bench_*.txt model_err.txt 2>/dev/null && rm -f parity_*.txt san_*.txt bench_*.txt
