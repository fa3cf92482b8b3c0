#!/bin/bash
# A/B/C of the MoE decode kernels: O = dist-me/switchyard (93b4bdf); N = router_norm in registers, topk by redux rounds,
# segment GEMV 2 rows a group at 3 blocks/SM; R = N with the segment GEMV at 1 row a group, 4 blocks/SM.
set -u
export SWITCHYARD_REQUIRE_CUDA=1
cd dist-me && xz -dk switchyard-new.xz switchyard-r1.xz && chmod +x switchyard-new switchyard-r1 && cd ..
O=./dist-me/switchyard; N=./dist-me/switchyard-new; R=./dist-me/switchyard-r1
for b in N R; do bin=${!b}; for f in moe_ router; do echo "$b $f: $($bin parity --backend cuda --filter $f 2>&1 | tail -1)"; done; done
echo "R memcheck moe_: $(compute-sanitizer --tool memcheck $R parity --backend cuda --filter moe_ 2>&1 | grep -E 'ERROR SUMMARY' | tail -1)"
echo "N memcheck router: $(compute-sanitizer --tool memcheck $N parity --backend cuda --filter router 2>&1 | grep -E 'ERROR SUMMARY' | tail -1)"
echo "N racecheck router: $(compute-sanitizer --tool racecheck $N parity --backend cuda --filter router 2>&1 | grep -E 'RACECHECK SUMMARY' | tail -1)"
for round in 1 2; do
  for b in O N R; do
    bin=${!b}
    for bs in 1 16; do
      $bin bench-model --backend cuda --shape 26b-a4b --batch $bs --steps 16 --json 2>/dev/null | python3 -c "import json,sys; d=json.load(sys.stdin); r=d['rows'][0]; print('$b round $round 26b-a4b b$bs', round(r['tokens_per_s'],1), 'tok/s', round(100*r['fraction_of_bound'],1), '% of', round(r['bound_tokens_per_s'],1))"
    done
  done
done
for b in N R; do
  bin=${!b}
  timeout 100 ncu --clock-control none --profile-from-start off -k regex:"moe|router" \
     --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --csv --page raw \
     $bin bench-model --backend cuda --shape 26b-a4b --batch 1 --steps 2 --profile-timed-steps > $OUT/ncu_$b.csv 2>&1
  echo "== $b"; python3 scripts/ncu_summary.py $OUT/ncu_$b.csv --steps 2 --copy-gbs 4266
done
echo "done at $SECONDS s"
