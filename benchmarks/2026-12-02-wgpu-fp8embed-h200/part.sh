#!/usr/bin/env bash
# Part of the eighth session's final device call (issue 14 item 2, embed_gather_fp8 on wgpu; at most
# 40 s). Run from the repo root with .device-vk/env.sh sourced, $BIN = switchyard built from main,
# $PART_OUT = output folder. Variants (kernels/src/embed/mod.rs, fp8_entry; the shader
# embed/embed_gather_fp8.wgsl):
#   row      SWITCHYARD_WGSL_FP8_EMBED unset: embed_gather_fp8, the default (a row at a time, per-code decode)
#   flat     =flat: embed_gather_fp8_flat, the group's rows as one run of 16-code units, four named slots, same decode
#   lut      =lut:  that layout with each row's 256 outputs precomputed in workgroup memory (RPG 2 at 4096 rows)
#   lut8     =lut8: embed_gather_fp8_lut8, the LUT over 8-code units (8-byte loads, one whole 16-byte store a lane)
#   lut-rpg4 =lut with SWITCHYARD_WGSL_GATHER_RPG=4 (1024 workgroups, two chunks of units a group), only if time is left
#   lut8-rpg3 =lut8 with SWITCHYARD_WGSL_GATHER_RPG=3 (2016 of a chunk's 2048 units used), only if time is left
# First wgpu parity of embed_gather_fp8 at each variant (must say replayed: N identical), then
# `bench --backend wgpu --iters 10 --filter embed_gather_fp8` for each, one process each, back to
# back, two rounds. Each bench prints its own copy ceiling (the yardstick) and GPU ms / % of copy.
set -u
: "${BIN:?}" "${PART_OUT:?}"
export SWITCHYARD_REQUIRE_WGPU=1
T0=$SECONDS
S=$PART_OUT/summary.txt
el() { echo $((SECONDS - T0)); }
left() { echo $((38 - (SECONDS - T0))); }
envs() { # variant -> env assignments
  case $1 in
    row) echo "X=0" ;;
    flat) echo "SWITCHYARD_WGSL_FP8_EMBED=flat" ;;
    lut) echo "SWITCHYARD_WGSL_FP8_EMBED=lut" ;;
    lut8) echo "SWITCHYARD_WGSL_FP8_EMBED=lut8" ;;
    lut-rpg4) echo "SWITCHYARD_WGSL_FP8_EMBED=lut SWITCHYARD_WGSL_GATHER_RPG=4" ;;
    lut8-rpg3) echo "SWITCHYARD_WGSL_FP8_EMBED=lut8 SWITCHYARD_WGSL_GATHER_RPG=3" ;;
  esac
}
parity() { # variant
  [ "$(left)" -gt 3 ] || return
  env $(envs $1) timeout 5 "$BIN" parity --backend wgpu --filter embed_gather_fp8 > $PART_OUT/parity_$1.txt 2>&1
  echo "parity $1 rc=$? $(grep -h 'passed' $PART_OUT/parity_$1.txt | tail -1) t=$(el)" | tee -a $S
}
for v in row flat lut lut8; do parity $v; done
bench() { # round variant
  local t=$(left)
  [ "$t" -gt 4 ] || { echo "skip r$1 $2 (t=$(el))" | tee -a $S; return; }
  [ "$t" -gt 8 ] && t=8
  env $(envs $2) timeout $t "$BIN" bench --backend wgpu --iters 10 --filter embed_gather_fp8 > $PART_OUT/bench_r$1_$2.txt 2>&1
  local rc=$?
  local ceil=$(grep -ho "copy ceiling: [0-9.]* GB/s" $PART_OUT/bench_r$1_$2.txt)
  # | kernel | shape | median ms | spread | GPU ms | MB | GB/s | GPU GB/s | % of copy | ...
  local row=$(grep -h "^| embed_gather_fp8" $PART_OUT/bench_r$1_$2.txt | awk -F'|' '{gsub(/ /,""); printf "GPU %s ms, GPU GB/s %s, wall %s ms", $6, $9, $4}')
  local pct=$(grep -h "^| embed_gather_fp8" $PART_OUT/bench_r$1_$2.txt | awk -F'|' -v c="${ceil//[^0-9.]/}" '{gsub(/ /,""); if (c > 0) printf "%.1f%% of copy", 100 * $9 / c}')
  echo "r$1 $2: $row, $pct; $ceil rc=$rc t=$(el)" | tee -a $S
}
for r in 1 2; do
  for v in row lut lut8 flat; do bench $r $v; done
done
for v in lut-rpg4 lut8-rpg3; do
  [ "$(left)" -gt 6 ] || break
  parity $v
  bench 1 $v
done
echo "% of copy = GPU GB/s / the copy ceiling of the same process; make the fastest SWITCHYARD_WGSL_FP8_EMBED value the default in fp8_entry (kernels/src/embed/mod.rs) if it beats row in both rounds" | tee -a $S
