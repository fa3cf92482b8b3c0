#!/usr/bin/env python3
"""Per-kernel totals of an Nsight Compute run, for the decode profiles of
BENCHMARKS.md.

    ncu --clock-control none --profile-from-start off \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
        --csv --page raw ./dist/switchyard bench-model --backend cuda --batch 1 \
        --steps 2 --profile-timed-steps > prof.csv
    python3 scripts/ncu_summary.py prof.csv --steps 2 --copy-gbs 4251

Groups the launches by kernel name and prints, per kernel: launches per
step, GPU time per step, its share, DRAM bytes per step and the DRAM
bandwidth it reached (and its fraction of --copy-gbs when given). Times
are ncu's serialised per-kernel durations: their sum is the GPU time of a
step without overlap, not the wall time.
"""
import argparse
import csv
import sys
from collections import defaultdict

UNIT_SCALE = {  # to seconds / bytes (ncu prints both spellings)
    "ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0,
    "nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1.0,
    "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9,
}


def read_rows(path):
    with open(path, newline="") as f:
        # ncu prints its own log lines (==PROF==) before the table.
        lines = [ln for ln in f if ln.startswith('"')]
    rows = list(csv.reader(lines))
    if len(rows) < 2:
        sys.exit(f"{path}: no ncu table (was the profiled range empty?)")
    header, units, data = rows[0], rows[1], rows[2:]
    return header, units, data


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--steps", type=int, default=1, help="decode steps the profile covers")
    ap.add_argument("--copy-gbs", type=float, help="copy bandwidth of the same run, GB/s (read + write)")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    header, units, data = read_rows(a.csv)
    col = {name: i for i, name in enumerate(header)}
    for need in ("Kernel Name", "gpu__time_duration.sum"):
        if need not in col:
            sys.exit(f"{a.csv}: no `{need}` column (columns: {', '.join(header[:12])}...)")

    def value(row, name):
        i = col.get(name)
        if i is None or not row[i].strip():
            return 0.0
        if units[i] not in UNIT_SCALE:
            sys.exit(f"{name}: unknown unit `{units[i]}`")
        return float(row[i].replace(",", "")) * UNIT_SCALE[units[i]]

    per = defaultdict(lambda: [0, 0.0, 0.0])  # launches, seconds, dram bytes
    for row in data:
        k = per[row[col["Kernel Name"]].split("(")[0]]
        k[0] += 1
        k[1] += value(row, "gpu__time_duration.sum")
        k[2] += value(row, "dram__bytes_read.sum") + value(row, "dram__bytes_write.sum")
    total_s = sum(v[1] for v in per.values())
    total_b = sum(v[2] for v in per.values())
    n = max(a.steps, 1)
    print(f"{len(data)} launches over {n} step(s): {len(data) / n:.0f} per step, "
          f"GPU time {total_s / n * 1e6:.1f} us per step, DRAM {total_b / n / 1e6:.1f} MB per step "
          f"({total_b / total_s / 1e9:.0f} GB/s over the kernels' time)")
    print()
    print("| kernel | launches/step | us/step | share | MB/step | GB/s | % of copy |")
    print("|---|---|---|---|---|---|---|")
    for name, (cnt, s, b) in sorted(per.items(), key=lambda kv: -kv[1][1])[: a.top]:
        gbs = b / s / 1e9 if s > 0 else 0.0
        pct = f"{100 * gbs / a.copy_gbs:.0f}%" if a.copy_gbs else "-"
        print(f"| {name} | {cnt / n:.0f} | {s / n * 1e6:.1f} | {100 * s / total_s:.1f}% | {b / n / 1e6:.2f} | {gbs:.0f} | {pct} |")


if __name__ == "__main__":
    main()
