#!/usr/bin/env python3
"""The BENCHMARKS.md decode table of one bench-model shape.

Reads `switchyard bench-model --shape S --json` output for cuda and for wgpu,
and the JSON lines of `scripts/hf_decode_bench.py --shape S`, and prints one
markdown table: rows Switchyard cuda, Switchyard wgpu, HF eager, HF compile;
for each batch size the decode tokens/s and its percentage of the bound; last
a row with the bound itself.

All rows are set against one bound, the one bench-model computed on cuda
(bytes each step reads / the copy bandwidth CUDA measured in that run): the
peers run on the same GPU, so one yardstick compares them. (bench-model's
own wgpu report divides by the copy bandwidth wgpu measured, which is lower.)
Without a cuda file the wgpu run's bound is used, and the table says so.

    python3 scripts/decode_tables.py --shape 26b-a4b --cuda bm_cuda.json \\
        --wgpu bm_wgpu.json --hf hf.jsonl
    python3 scripts/decode_tables.py --self-test

With --prefill it prints the prefill table of the shape instead: rows
Switchyard cuda (the "prefill" section of `bench-model --prefill-len P
--json`), HF eager and HF compile (hf_decode_bench.py --prefill-len P lines,
modes prefill-eager / prefill-compile); the prompt length, the median pass in
ms, prompt tokens/s, TFLOP/s (every row divided into the FLOPs bench-model
counted for one pass: the same model) and Switchyard's tokens/s over the
row's.

    python3 scripts/decode_tables.py --prefill --shape default --cuda bm_prefill.json --hf hf_prefill.jsonl
"""
import argparse
import json
import os
import sys
import tempfile


def pct(x):
    return f"{x:.0f}%" if x >= 10 else f"{x:.1f}%"


def load_bench(path, shape):
    """bench-model JSON as {batch: row}, plus the document; None if path is None."""
    if not path:
        return None, {}
    with open(path) as f:
        doc = json.load(f)
    if doc.get("shape") != shape:
        sys.exit(f"error: {path} is bench-model output for shape {doc.get('shape')!r}, not {shape!r}")
    return doc, {r["batch"]: r for r in doc["rows"]}


def load_hf(paths, shape):
    """{(mode, batch): line} of the HF JSON lines for `shape` (the last line wins)."""
    rows = {}
    for path in paths or []:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line.startswith("{"):
                    continue  # progress text that shared the file
                try:
                    r = json.loads(line)
                except json.JSONDecodeError as e:
                    sys.exit(f"error: {path}:{n}: not JSON ({e})")
                if r.get("shape") == shape:
                    rows[(r["mode"], r["batch"])] = r
    return rows


def table(shape, cuda_path=None, wgpu_path=None, hf_paths=None, batches=(1, 16)):
    cuda_doc, cuda = load_bench(cuda_path, shape)
    wgpu_doc, wgpu = load_bench(wgpu_path, shape)
    hf = load_hf(hf_paths, shape)
    ref_doc, ref, ref_name = (cuda_doc, cuda, "cuda") if cuda_doc else (wgpu_doc, wgpu, "wgpu")
    if ref_doc is None:
        sys.exit("error: no bench-model JSON (--cuda or --wgpu) to take the bound from")

    def bound(b):
        return ref[b]["bound_tokens_per_s"] if b in ref else None

    def cells(tps, b, failed=None):
        if failed:
            return ["failed", "-"]
        if tps is None:
            return ["not run", "-"]
        bd = bound(b)
        return [f"{tps:.1f}", pct(100 * tps / bd) if bd else "-"]

    lines = []
    head = "| | " + " | ".join(f"batch {b} tok/s | % of bound" for b in batches) + " |"
    lines += [head, "|---|" + "---|---|" * len(batches)]
    for label, rows in (("Switchyard cuda", cuda), ("Switchyard wgpu", wgpu)):
        row = [label]
        for b in batches:
            row += cells(rows[b]["tokens_per_s"] if b in rows else None, b)
        lines.append("| " + " | ".join(row) + " |")
    failures = []
    for mode in ("eager", "compile"):
        row = [f"HF {mode}"]
        for b in batches:
            r = hf.get((mode, b))
            err = r.get("error") if r else None
            if err:
                failures.append(f"HF {mode} batch {b}: {err}")
            row += cells(r.get("tokens_per_s") if r else None, b, failed=err)
        lines.append("| " + " | ".join(row) + " |")
    brow = [f"bound ({ref_name} copy {ref_doc['copy_gb_per_s']:.0f} GB/s)"]
    for b in batches:
        bd = bound(b)
        brow += [f"{bd:.1f}" if bd else "-", "100%" if bd else "-"]
    lines.append("| " + " | ".join(brow) + " |")

    mb = ", ".join(
        f"batch {b} {ref[b]['bytes_per_step']['total'] / 1e6:.0f} MB"
        + (f" ({ref[b]['bytes_per_step']['experts_per_layer']:.1f} experts/layer)" if ref[b]["bytes_per_step"]["moe_layers"] else "")
        for b in batches if b in ref
    )
    notes = [f"Shape `{shape}`, {ref_doc['model_bytes'] / 1e9:.2f} GB of weights; bytes read per step: {mb}."]
    for label, r in (("HF eager", hf.get(("eager", batches[0]))), ("HF compile", hf.get(("compile", batches[0])))):
        if r and r.get("note"):
            notes.append(f"{label}: transformers {r.get('transformers')}, {r['note']}.")
    notes += [f"{f}." for f in failures]
    return "\n".join(lines) + "\n\n" + "\n".join(notes) + "\n"


def prefill_table(shape, cuda_path=None, hf_paths=None):
    """The prefill table of one shape (see the module docstring)."""
    doc, _ = load_bench(cuda_path, shape)
    hf = load_hf(hf_paths, shape)
    sy = (doc or {}).get("prefill")
    if cuda_path and not sy:
        sys.exit(f"error: {cuda_path} has no prefill section (run bench-model with --prefill-len)")
    flops = sy["flops"]["total"] if sy else None
    sy_tps = sy["tokens_per_s"] if sy else None
    lines = ["| | prompt tokens | prefill ms (median) | tokens/s | TFLOP/s | Switchyard / this |", "|---|---|---|---|---|---|"]

    def row(label, p, ms, tps, failed=None):
        if failed:
            return f"| {label} | {p or '-'} | failed | - | - | - |"
        if tps is None:
            return f"| {label} | - | not run | - | - | - |"
        tf = f"{flops / (ms * 1e-3) / 1e12:.1f}" if flops and ms else "-"
        ratio = f"{sy_tps / tps:.2f}x" if sy_tps else "-"
        return f"| {label} | {p} | {ms:.1f} | {tps:.0f} | {tf} | {ratio} |"

    lines.append(row("Switchyard cuda", sy and sy["prompt_len"], sy and sy["ms_median"], sy_tps))
    notes, failures = [], []
    for mode in ("eager", "compile"):
        r = hf.get((f"prefill-{mode}", 1))
        err = r.get("error") if r else None
        if err:
            failures.append(f"HF {mode}: {err}")
        if r and sy and r.get("prefill_len") != sy["prompt_len"]:
            sys.exit(f"error: HF {mode} prefilled {r.get('prefill_len')} tokens, Switchyard {sy['prompt_len']}")
        lines.append(row(f"HF {mode}", r and r.get("prefill_len"), r and r.get("ms"), r and r.get("tokens_per_s"), failed=err))
        if r and r.get("note"):
            notes.append(f"HF {mode}: transformers {r.get('transformers')}, torch {r.get('torch')}, {r['note']}.")
    if sy:
        f = sy["flops"]
        head = (f"Shape `{shape}`, {doc['model_bytes'] / 1e9:.2f} GB of weights; one pass of {sy['prompt_len']} tokens is "
                f"{f['total'] / 1e12:.2f} TFLOP ({f['linear'] / 1e12:.2f} linear + {f['attention'] / 1e12:.3f} attention + "
                f"{f['head'] / 1e9:.2f} GFLOP head; {f['per_token'] / 1e9:.2f} GFLOP/token). Switchyard: median of "
                f"{sy['timed_passes']} passes ({sy['ms_min']:.1f}..{sy['ms_max']:.1f} ms)"
                + ("" if sy.get("same_token", True) else ", NOT the same token every pass") + ".")
        notes.insert(0, head)
        if sy.get("launches"):
            n = sum(x["count"] for x in sy["launches"])
            top = ", ".join(f"`{x['entry']}` x{x['count']}" for x in sy["launches"][:8])
            notes.insert(1, f"Switchyard kernels of one pass ({n} launches, most launched first): {top}"
                         + (", ..." if len(sy["launches"]) > 8 else "") + ".")
    notes += [f"{f}." for f in failures]
    return "\n".join(lines) + "\n\n" + "\n".join(notes) + "\n"


def prefill_self_test(d):
    """The prefill table of hand-written inputs."""
    doc = {"shape": "default", "backend": "cuda", "copy_gb_per_s": 4000.0, "model_bytes": 7.08e9, "rows": [],
           "prefill": {"prompt_len": 4096, "ms_median": 100.0, "ms_min": 99.0, "ms_max": 101.5, "tokens_per_s": 40960.0,
                       "timed_passes": 5, "same_token": True,
                       "flops": {"total": 25e12, "linear": 24e12, "attention": 0.9e12, "head": 1.3e9, "per_token": 6.1e9},
                       "launches": [{"entry": "gemm_sm90::dense_gemm_wgmma_n256", "count": 120},
                                    {"entry": "flash_prefill::attention_prefill_flash_hd256", "count": 25}]}}
    cuda = os.path.join(d, "prefill.json")
    with open(cuda, "w") as f:
        json.dump(doc, f)
    hf = os.path.join(d, "hf_prefill.jsonl")
    with open(hf, "w") as f:
        for mode, ms, err in [("prefill-eager", 400.0, None), ("prefill-compile", None, "CompileTimeout: past 100 s")]:
            f.write(json.dumps({"shape": "default", "mode": mode, "batch": 1, "prefill_len": 4096, "ms": ms,
                                "tokens_per_s": 4096 / (ms * 1e-3) if ms else None, "error": err,
                                "note": "bf16, sdpa" if ms else None, "transformers": "5.17.0", "torch": "2.11"}) + "\n")
        # A decode line of the same shape is not a prefill row.
        f.write(json.dumps({"shape": "default", "mode": "eager", "batch": 1, "tokens_per_s": 9.0, "error": None}) + "\n")
    got = prefill_table("default", cuda, [hf]).splitlines()
    want = [
        "| | prompt tokens | prefill ms (median) | tokens/s | TFLOP/s | Switchyard / this |",
        "|---|---|---|---|---|---|",
        # 25 TFLOP in 100 ms = 250 TFLOP/s; in 400 ms 62.5.
        "| Switchyard cuda | 4096 | 100.0 | 40960 | 250.0 | 1.00x |",
        "| HF eager | 4096 | 400.0 | 10240 | 62.5 | 4.00x |",
        "| HF compile | 4096 | failed | - | - | - |",
        "",
        "Shape `default`, 7.08 GB of weights; one pass of 4096 tokens is 25.00 TFLOP (24.00 linear + 0.900 attention + "
        "1.30 GFLOP head; 6.10 GFLOP/token). Switchyard: median of 5 passes (99.0..101.5 ms).",
        "Switchyard kernels of one pass (145 launches, most launched first): `gemm_sm90::dense_gemm_wgmma_n256` x120, "
        "`flash_prefill::attention_prefill_flash_hd256` x25.",
        "HF eager: transformers 5.17.0, torch 2.11, bf16, sdpa.",
        "HF compile: CompileTimeout: past 100 s.",
    ]
    assert got == want, "\n".join(["got:"] + got + ["want:"] + want)
    # Without HF lines the rows say so; a file without a prefill section is refused.
    got = prefill_table("default", cuda, []).splitlines()
    assert got[3] == "| HF eager | - | not run | - | - | - |", got[3]
    plain = os.path.join(d, "plain.json")
    with open(plain, "w") as f:
        json.dump(dict(doc, prefill=None), f)
    try:
        prefill_table("default", plain, [hf])
    except SystemExit as e:
        assert "no prefill section" in str(e), e
    else:
        raise AssertionError("a bench-model file without a prefill section made a prefill table")


def self_test():
    """The table of hand-written inputs, checked cell by cell."""
    def bench(backend, copy, rows):
        return {
            "shape": "26b-a4b", "backend": backend, "copy_gb_per_s": copy, "model_bytes": 51.6e9, "rows": [
                {"batch": b, "tokens_per_s": t, "bound_tokens_per_s": bd,
                 "bytes_per_step": {"total": mb * 1e6, "moe_layers": 30, "experts_per_layer": e}}
                for b, t, bd, mb, e in rows
            ],
        }
    d = tempfile.mkdtemp()
    files = {
        "cuda.json": bench("cuda", 4200.0, [(1, 100.0, 500.0, 8400, 8.0), (16, 1200.0, 6000.0, 11200, 82.4)]),
        "wgpu.json": bench("wgpu", 3500.0, [(1, 5.0, 400.0, 8400, 8.0), (16, 40.0, 5000.0, 11200, 82.4)]),
        "other.json": dict(bench("cuda", 1.0, []), shape="default"),
    }
    for name, doc in files.items():
        with open(os.path.join(d, name), "w") as f:
            json.dump(doc, f)
    hf = os.path.join(d, "hf.jsonl")
    with open(hf, "w") as f:
        f.write("transformers 5.17.0 progress line\n")
        for mode, b, t, err in [("eager", 1, 20.0, None), ("eager", 16, 64.0, None), ("compile", 1, None, "RuntimeError: boom"),
                                ("compile", 16, 3000.0, None), ("eager", 1, 999.0, None)]:
            f.write(json.dumps({"shape": "26b-a4b", "mode": mode, "batch": b, "tokens_per_s": t, "error": err,
                                "note": "static cache" if t else None, "transformers": "5.17.0"}) + "\n")
        # Another shape's line is not this table's.
        f.write(json.dumps({"shape": "default", "mode": "compile", "batch": 1, "tokens_per_s": 1.0, "error": None}) + "\n")
    p = lambda n: os.path.join(d, n)  # noqa: E731
    got = table("26b-a4b", p("cuda.json"), p("wgpu.json"), [hf]).splitlines()
    want = [
        "| | batch 1 tok/s | % of bound | batch 16 tok/s | % of bound |",
        "|---|---|---|---|---|",
        "| Switchyard cuda | 100.0 | 20% | 1200.0 | 20% |",
        # wgpu against the cuda bound: 5/500 = 1%, 40/6000 = 0.67%.
        "| Switchyard wgpu | 5.0 | 1.0% | 40.0 | 0.7% |",
        # The last eager batch-1 line wins: 999/500.
        "| HF eager | 999.0 | 200% | 64.0 | 1.1% |",
        "| HF compile | failed | - | 3000.0 | 50% |",
        "| bound (cuda copy 4200 GB/s) | 500.0 | 100% | 6000.0 | 100% |",
        "",
        "Shape `26b-a4b`, 51.60 GB of weights; bytes read per step: batch 1 8400 MB (8.0 experts/layer), "
        "batch 16 11200 MB (82.4 experts/layer).",
        "HF eager: transformers 5.17.0, static cache.",
        "HF compile batch 1: RuntimeError: boom.",
    ]
    assert got == want, "\n".join(["got:"] + got + ["want:"] + want)
    # Without cuda: the wgpu bound, named; missing rows say so.
    got = table("26b-a4b", None, p("wgpu.json"), []).splitlines()
    assert got[2] == "| Switchyard cuda | not run | - | not run | - |", got[2]
    assert got[3] == "| Switchyard wgpu | 5.0 | 1.2% | 40.0 | 0.8% |", got[3]
    assert got[6] == "| bound (wgpu copy 3500 GB/s) | 400.0 | 100% | 5000.0 | 100% |", got[6]
    # A file of another shape is refused.
    try:
        table("26b-a4b", p("other.json"))
    except SystemExit as e:
        assert "shape 'default', not '26b-a4b'" in str(e), e
    else:
        raise AssertionError("a default-shape file made a 26b-a4b table")
    prefill_self_test(d)
    print("decode_tables self-test: 4 passed, 0 failed")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", help="the bench-model shape (default, 26b-a4b)")
    ap.add_argument("--cuda", help="`switchyard bench-model --backend cuda --json` output")
    ap.add_argument("--wgpu", help="`switchyard bench-model --backend wgpu --json` output")
    ap.add_argument("--hf", action="append", help="hf_decode_bench.py JSON lines (repeatable)")
    ap.add_argument("--batches", default="1,16", help="batch sizes, the table's columns")
    ap.add_argument("--self-test", action="store_true", help="check the table on hand-written inputs")
    ap.add_argument("--prefill", action="store_true", help="the prefill table (bench-model --prefill-len, HF --prefill-len)")
    a = ap.parse_args()
    if a.self_test:
        self_test()
        return 0
    if not a.shape:
        ap.error("--shape is required")
    if a.prefill:
        print(prefill_table(a.shape, a.cuda, a.hf), end="")
        return 0
    print(table(a.shape, a.cuda, a.wgpu, a.hf, [int(b) for b in a.batches.split(",")]), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
