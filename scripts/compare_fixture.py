#!/usr/bin/env python3
"""Compares `switchyard generate --json` output with a fixture's expected.json
under the whole-model rule (ARCHITECTURE.md, parity tolerances): per step cosine >= 0.999 and
max|diff| <= 2e-2 * max|ref|; greedy token identical where HF's top-2 margin
exceeds 0.1. Usage: compare_fixture.py EXPECTED_JSON OURS_JSON [LABEL]
Exits 1 when the rule fails."""
import json
import math
import sys


def main():
    exp = json.load(open(sys.argv[1]))
    label = sys.argv[3] if len(sys.argv) > 3 else sys.argv[2]
    try:
        ours = json.load(open(sys.argv[2]))
    except (OSError, ValueError) as e:
        print(f"{label}: FAIL: no generate output ({e})")
        sys.exit(1)
    ok = True
    min_cos, max_rel = 1.0, 0.0
    for step, (a, b) in enumerate(zip(ours["logits"], exp["logits"])):
        dot = sum(x * y for x, y in zip(a, b))
        cos = dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))
        rel = max(abs(x - y) for x, y in zip(a, b)) / max(abs(y) for y in b)
        min_cos, max_rel = min(min_cos, cos), max(max_rel, rel)
        token_ok = exp["top2_margin"][step] <= 0.1 or ours["tokens"][step] == exp["tokens"][step]
        if cos < 0.999 or rel > 2e-2 or not token_ok:
            ok = False
            print(f"{label}: step {step} FAILS: cosine {cos:.6f}, max rel {rel:.4f}, token {ours['tokens'][step]} vs {exp['tokens'][step]}")
    if len(ours["logits"]) != len(exp["logits"]):
        ok = False
        print(f"{label}: {len(ours['logits'])} steps, expected {len(exp['logits'])}")
    print(f"{label}: min cosine {min_cos:.6f}, max rel error {max_rel:.4f}, tokens {'equal' if ours['tokens'] == exp['tokens'] else 'differ'}: {'PASS' if ok else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
