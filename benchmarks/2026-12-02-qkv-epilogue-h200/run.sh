#!/usr/bin/env bash
# Issue 12 item 2, helper h2: qkv_prep in the q/k/v projection's epilogue at batch 1
# (dense_gemv_layer_out_rmsnorm_qkv_prep_bf16), one H200 call (<= 150 s).
# One binary (abc460a + the change): B = default (the fused launch where it applies),
# A = SWITCHYARD_QKV_EPILOGUE=0 (the two launches, as abc460a's graph).
# Result (summary.txt): B slower, A 395.0 / 392.7 / 389.1 tok/s, B 384.2 / 384.2 / 385.3. The
# committed default is therefore the two launches; the fused path now needs SWITCHYARD_QKV_EPILOGUE=1
# (the binary measured here took it by default and A set =0, as below).
# here: cargo build --release -p switchyard-cli; strip into dist-h2/switchyard; copy this script to dist-h2/run.sh
# there (carry dist-h2): bash dist-h2/run.sh
set -u
export OUT=${OUT:-/tmp/h2-out}
R=$OUT/raw
mkdir -p "$R"
X=$OUT/summary.txt
START=$SECONDS
export SWITCHYARD_REQUIRE_CUDA=1 SWITCHYARD_CUDA_CACHE=/tmp/sy-cubins-h2
B=./dist-h2/switchyard
chmod +x $B
t() { echo "-- $((SECONDS - START)) s" >> $X; }
left() { [ $((SECONDS - START)) -lt "$1" ]; } # still before second $1 of the call
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $X
# NVRTC: one short decode run compiles every decode module beside the parity runs.
( timeout 80 $B bench-model --backend cuda --batch 1 --steps 2 > $R/warm.txt 2>&1 ) &
WARM=$!
timeout 45 $B parity --backend cuda --filter gemv > $R/parity_gemv.txt 2>&1
echo "parity gemv: $(grep -E '^cuda: ' $R/parity_gemv.txt | tail -1)" >> $X
timeout 30 $B parity --backend cuda --filter qkv_prep > $R/parity_qkv.txt 2>&1
echo "parity qkv_prep: $(grep -E '^cuda: ' $R/parity_qkv.txt | tail -1)" >> $X
grep -E "qkv_prep" $R/parity_qkv.txt | cut -c1-220 >> $X; t
K=dense_gemv_layer_out_rmsnorm_qkv_prep
timeout 40 compute-sanitizer --tool memcheck $B parity --backend cuda --filter $K > $R/memcheck.txt 2>&1 &
M=$!
timeout 40 compute-sanitizer --tool racecheck $B parity --backend cuda --filter $K > $R/racecheck.txt 2>&1 &
RC=$!
wait $M $RC
grep -hE "ERROR SUMMARY|RACECHECK SUMMARY|^cuda: " $R/memcheck.txt $R/racecheck.txt | sed 's/^/sanitizer: /' >> $X; t
wait $WARM
grep -E "^\| 1 " $R/warm.txt | tail -1 | sed 's/^/warm: /' >> $X; t
bm() { # tag env...
  local tag=$1; shift
  left 126 || return
  env "$@" timeout 18 $B bench-model --backend cuda --batch 1 --steps 32 > $R/bm_$tag.txt 2>&1
  grep -E "^\| 1 \|" $R/bm_$tag.txt | sed "s/^/bm $tag: /" >> $X
}
echo "== bench-model batch 1 (| batch | tok/s | ms/token | ms/step (median, min..max) | MB | experts | bound | % | prefill ms |)" >> $X
grep -E "^\| batch" $R/warm.txt | head -1 >> $X
bm A1 SWITCHYARD_QKV_EPILOGUE=0; bm B1 X=0; bm A2 SWITCHYARD_QKV_EPILOGUE=0; bm B2 X=0; t
bm A3 SWITCHYARD_QKV_EPILOGUE=0; bm B3 X=0; t
( cd "$OUT" && tar czf raw.tgz raw && rm -rf raw )
