#!/bin/bash
# One call: per-kernel ncu maps of a decode step (26b-a4b and default at batch 1) on the committed build.
set -u
S=./dist-me/switchyard
export SWITCHYARD_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for shape in 26b-a4b default; do
  $S bench-model --backend cuda --shape $shape --batch 1 --steps 8 --json > $OUT/bm_$shape.json 2>$OUT/bm_$shape.err
  copy=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(round(d["copy_gb_per_s"])); r=d["rows"]; print(r, file=sys.stderr)' $OUT/bm_$shape.json 2>>$OUT/rows.txt)
  timeout 150 ncu --clock-control none --profile-from-start off \
     --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --csv --page raw \
     $S bench-model --backend cuda --shape $shape --batch 1 --steps 2 --profile-timed-steps > $OUT/ncu_$shape.csv 2>&1
  { echo "### ncu: $shape, batch 1 (copy $copy GB/s)"; python3 scripts/ncu_summary.py $OUT/ncu_$shape.csv --steps 2 --copy-gbs $copy; echo; } >> $OUT/profile.md 2>&1
  echo "$shape done at $SECONDS s"
done
cat $OUT/rows.txt
cat $OUT/profile.md
