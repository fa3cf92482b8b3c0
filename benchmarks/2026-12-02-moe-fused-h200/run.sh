#!/bin/bash
# Issue 12 item 5, MoE decode fusions: one H200 call (build in dist-moedec/switchyard.xz).
# Configs of the one binary: U = SWITCHYARD_MOE_UNFUSED=1 (the separate launches, as before this work),
# G = SWITCHYARD_MOE_UNFUSED=norm (fused routing + GELU epilogue), F = all fused (the default).
set -u
export SWITCHYARD_REQUIRE_CUDA=1
cd dist-moedec && xz -dkf switchyard.xz && chmod +x switchyard && cd ..
S=./dist-moedec/switchyard
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
echo "[$SECONDS s] parity"
for f in moe_ router; do
  $S parity --backend cuda --filter $f > $OUT/parity_$f.txt 2>&1
  echo "parity $f: $(grep -E '^cuda: ' $OUT/parity_$f.txt)"; grep -E 'FAIL' $OUT/parity_$f.txt | head -8
done
grep -E "moe_route_decode|gate_up_gelu" $OUT/parity_moe_.txt | head -40
echo "[$SECONDS s] fixtures"
for fx in tiny-moe tiny-26b-a4b; do
  for c in F U; do
    if [ $c = U ]; then export SWITCHYARD_MOE_UNFUSED=1; else unset SWITCHYARD_MOE_UNFUSED; fi
    $S generate --model tests/fixtures/$fx --backend cuda --prompt-ids 2,17,99,5,250,31 --max-new-tokens 10 --ignore-eos --json > $OUT/$fx.$c.json 2>>$OUT/model.txt
    echo "$c: $(python3 scripts/compare_fixture.py tests/fixtures/$fx/expected.json $OUT/$fx.$c.json "$fx on cuda vs HF" | tail -1)"
  done
done
unset SWITCHYARD_MOE_UNFUSED
echo "[$SECONDS s] bench-model"
for round in 1 2; do
  for c in U G F; do
    case $c in U) export SWITCHYARD_MOE_UNFUSED=1;; G) export SWITCHYARD_MOE_UNFUSED=norm;; F) unset SWITCHYARD_MOE_UNFUSED;; esac
    for bs in 1 16; do
      $S bench-model --backend cuda --shape 26b-a4b --batch $bs --steps 16 --json > $OUT/bm_${c}_b${bs}_r$round.json 2>$OUT/bm_${c}_b${bs}_r$round.err
      python3 -c "import json,sys; d=json.load(open(sys.argv[1])); r=d['rows'][0]; print('$c round $round 26b-a4b b$bs', round(r['tokens_per_s'],1), 'tok/s', round(100*r['fraction_of_bound'],1), '% of', round(r['bound_tokens_per_s'],1), 'copy', round(d.get('copy_gb_per_s',0)))" $OUT/bm_${c}_b${bs}_r$round.json
    done
  done
done
unset SWITCHYARD_MOE_UNFUSED
echo "[$SECONDS s] ncu"
copy=$(python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["copy_gb_per_s"]))' $OUT/bm_F_b1_r2.json 2>/dev/null || echo 4266)
timeout 45 ncu --clock-control none --profile-from-start off \
   --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --csv --page raw \
   $S bench-model --backend cuda --shape 26b-a4b --batch 1 --steps 1 --profile-timed-steps > $OUT/ncu_F.csv 2>&1
python3 scripts/ncu_summary.py $OUT/ncu_F.csv --steps 1 --copy-gbs $copy > $OUT/ncu_F.md 2>&1; cat $OUT/ncu_F.md | head -40
echo "[$SECONDS s] sanitizers"
left=$((174 - SECONDS))
( for f in moe_route_decode gate_up_gelu router; do
    timeout 15 compute-sanitizer --tool memcheck $S parity --backend cuda --filter $f > $OUT/memcheck_$f.txt 2>&1
  done
  timeout $((174 - SECONDS)) compute-sanitizer --tool memcheck $S parity --backend cuda --filter moe_ > $OUT/memcheck_moe_.txt 2>&1 ) &
M=$!
( for f in moe_route_decode gate_up_gelu router; do
    timeout $((left / 3)) compute-sanitizer --tool racecheck $S parity --backend cuda --filter $f > $OUT/racecheck_$f.txt 2>&1
  done ) &
R=$!
wait $M $R
for f in memcheck_moe_route_decode memcheck_gate_up_gelu memcheck_router memcheck_moe_ racecheck_moe_route_decode racecheck_gate_up_gelu racecheck_router; do
  echo "$f: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/$f.txt | tail -1) | $(grep -E '^cuda: ' $OUT/$f.txt)"
done
echo "[$SECONDS s] done"
