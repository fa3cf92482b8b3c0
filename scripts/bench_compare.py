#!/usr/bin/env python3
"""Before/after table of two `switchyard bench --json` outputs from one device
call: per (kernel, shape) the median ms of each and the ratio after/before.
Kernels that were renamed or merged between the builds are matched by the
names in RENAMED. Usage: bench_compare.py BEFORE.json AFTER.json"""
import json
import sys

# Old name -> new name, for kernels whose declaration was merged or renamed.
RENAMED = {
    "attention_decode_partial": "attention_decode",
    "dense_gemm_splitk_partial": "dense_gemm_splitk_bf16",
}


def load(path):
    text = open(path).read()
    start = text.index("{")
    doc, _ = json.JSONDecoder().raw_decode(text[start:])
    return doc


def main():
    before, after = load(sys.argv[1]), load(sys.argv[2])
    b = {(RENAMED.get(c["kernel"], c["kernel"]), c["shape"]): c for c in before["cases"]}
    print(f"copy ceiling: before {before['copy_gb_per_s']:.0f} GB/s, after {after['copy_gb_per_s']:.0f} GB/s")
    print("| kernel | shape | before ms | after ms | after/before |")
    print("|---|---|---|---|---|")
    worst = (0.0, "")
    slower = 0
    for c in after["cases"]:
        key = (c["kernel"], c["shape"])
        old = b.get(key)
        if old is None:
            print(f"| {c['kernel']} | {c['shape']} | - | {c['median_ms']:.4f} | new |")
            continue
        r = c["median_ms"] / old["median_ms"]
        slower += r > 1.05
        if r > worst[0]:
            worst = (r, f"{c['kernel']} {c['shape']}")
        print(f"| {c['kernel']} | {c['shape']} | {old['median_ms']:.4f} | {c['median_ms']:.4f} | {r:.3f} |")
    print(f"\nrows slower by more than 5%: {slower}; worst after/before {worst[0]:.3f} ({worst[1]})")


if __name__ == "__main__":
    main()
