#!/bin/bash
# Lead's first call of the seventh session: attention_decode_tm with the park in each team's own
# stages (and two teams by the chunk rule again) under racecheck + memcheck; the decode attention
# rows and bench-model against the one-team plan (SWITCHYARD_ATTN_DECODE_TEAMS=1, same binary);
# the shared decode_tile variant (switchyard-tile); an ncu map of the default shape at batch 16.
set -u
cd dist-me7 && for f in *.xz; do xz -d "$f"; done; chmod +x switchyard*; cd ..
export SWITCHYARD_REQUIRE_CUDA=1
S=./dist-me7/switchyard; T=./dist-me7/switchyard-tile
X=$OUT/me7.txt
t() { echo "-- ${SECONDS} s" >> $X; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $X
# warm the module caches
timeout 60 $S parity --backend cuda --filter attention_decode > $OUT/parity_attn.txt 2>&1
timeout 60 $T parity --backend cuda --filter attention_decode > $OUT/parity_attn_tile.txt 2>&1
echo "== parity attention_decode (new, tile)" >> $X; grep -h "^cuda: " $OUT/parity_attn.txt $OUT/parity_attn_tile.txt >> $X
for tool in racecheck memcheck; do
  for b in $S $T; do
    timeout 90 compute-sanitizer --tool $tool $b parity --backend cuda --filter attention_decode > $OUT/san.txt 2>&1
    grep -E "^cuda: |SUMMARY|Race reported|in function" $OUT/san.txt | head -8 | sed "s|^|$tool $b: |" >> $X
  done
done; t
echo "== bench attention_decode: one team (TEAMS=1), rule (new), tile" >> $X
SWITCHYARD_ATTN_DECODE_TEAMS=1 timeout 60 $S bench --backend cuda --iters 10 --filter attention_decode > $OUT/b_one.txt 2>&1
timeout 60 $S bench --backend cuda --iters 10 --filter attention_decode > $OUT/b_rule.txt 2>&1
timeout 60 $T bench --backend cuda --iters 10 --filter attention_decode > $OUT/b_tile.txt 2>&1
for f in b_one b_rule b_tile; do echo "# $f" >> $X; grep -E "copy|^\| attention" $OUT/$f.txt >> $X; done; t
echo "== bench-model (one / rule / tile, twice)" >> $X
bm() { local tag=$1; shift; timeout 60 "$@" 2>&1 | grep "^| [0-9]" | sed "s/^/$tag /" >> $X; }
for r in 1 2; do
  for b in 1 16; do
    SWITCHYARD_ATTN_DECODE_TEAMS=1 bm "one b$b" $S bench-model --backend cuda --batch $b --steps 24
    bm "rule b$b" $S bench-model --backend cuda --batch $b --steps 24
    bm "tile b$b" $T bench-model --backend cuda --batch $b --steps 24
  done
done; t
echo "== ncu default batch 16" >> $X
$S bench-model --backend cuda --batch 16 --steps 8 --json > $OUT/bm16.json 2>/dev/null
copy=$(python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["copy_gb_per_s"]))' $OUT/bm16.json)
timeout 120 ncu --clock-control none --profile-from-start off \
   --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --csv --page raw \
   $S bench-model --backend cuda --batch 16 --steps 2 --profile-timed-steps > $OUT/ncu_b16.csv 2>&1
python3 scripts/ncu_summary.py $OUT/ncu_b16.csv --steps 2 --copy-gbs $copy > $OUT/profile_b16.md 2>&1
cat $OUT/profile_b16.md >> $X; t
cat $X
