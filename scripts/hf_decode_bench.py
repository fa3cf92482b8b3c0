#!/usr/bin/env python3
"""HF transformers decode throughput on the model `switchyard bench-model` times.

The config is the one `switchyard bench-model --shape SHAPE --print-hf-config`
prints (run here through --switchyard), so the two never diverge; or read from
a file (--hf-config), or from `switchyard bench-model --json` output
(--bench-json). Random bf16 weights (HF's own init from the config, no
download) on the GPU, a static KV cache, a random prompt of --prompt-len tokens
per sequence, then greedy decode. Measures decode tokens/s at each batch size
in each mode:
  - eager: static cache, torch.compile off (generation_config.disable_compile);
  - compile: static cache with transformers' automatic torch.compile of the
    decode step (reported as failed, with the reason, if it fails here).
For an MoE shape the experts run as transformers chooses (its default
experts_implementation, which generate() switches to batched_mm for decode on
a GPU), or as --experts says.

Decode time is measured as the difference between a generate() of 1 + steps
new tokens and one of 1 new token (the prefill and the first token), so the
prompt pass is not counted. Both are run with EOS off, so every step runs.
That matches bench-model, which times decode steps only, each ending in a
device-to-host copy of the chosen tokens (generate() also syncs every step
for its stopping check).

With --prefill-len P the script times prefill instead of decode: one
forward of a [1, P] random prompt (use_cache=False, logits_to_keep=1: the LM
head scores only the last row, as a prefill does; no KV cache is kept),
  - prefill-eager: the model as built;
  - prefill-compile: torch.compile(model) (default mode, dynamic=False),
    compiled by its first call at this shape (the compile time is reported,
    and the compile is abandoned past --compile-timeout seconds and reported
    as failed with the reason, as is any other failure);
each warmed up, then timed --repeats times (synchronised, the median). The
lines carry mode "prefill-eager" / "prefill-compile", batch 1, prefill_len,
tokens_per_s (prompt tokens per second), ms (the median forward), ms_min,
compile_s, note, error. decode_tables.py --prefill makes the table.

Output: one JSON object per line on stdout (or appended to --out), one per
(mode, batch):
  {"shape", "mode", "batch", "tokens_per_s", "ms_per_step", "steps",
   "prompt_len", "note", "error", "model_bytes", "transformers", "torch",
   "device"}
tokens_per_s and ms_per_step are null when the case failed (error says why).
Progress and a markdown table go to stderr. scripts/decode_tables.py reads
these lines.

Run on the GPU machine:
    python3 scripts/hf_decode_bench.py --shape 26b-a4b            # needs ./dist/switchyard
    python3 scripts/hf_decode_bench.py --hf-config cfg.json --shape default
    python3 scripts/hf_decode_bench.py --shape 26b-a4b --print-config   # the config only (no torch)
    python3 scripts/hf_decode_bench.py --shape default --prefill-len 4096   # prefill, eager and compile
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time


def load_config(a):
    """(shape name, HF config dict) from the arguments."""
    if a.hf_config:
        with open(a.hf_config) as f:
            return a.shape, json.load(f)
    if a.bench_json:
        with open(a.bench_json) as f:
            doc = json.load(f)
        return doc.get("shape", a.shape), doc["hf_config"]
    cmd = [a.switchyard, "bench-model", "--shape", a.shape, "--print-hf-config"]
    try:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as e:
        detail = getattr(e, "stderr", "") or str(e)
        sys.exit(f"error: `{' '.join(cmd)}` failed ({detail.strip()}); build switchyard or pass --hf-config FILE")
    return a.shape, json.loads(out.stdout)


def log(msg=""):
    print(msg, file=sys.stderr, flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="default", help="bench-model shape: default or 26b-a4b")
    ap.add_argument("--switchyard", default=os.environ.get("S", "./dist/switchyard"),
                    help="the switchyard binary that prints the shape's config (default: $S or ./dist/switchyard)")
    ap.add_argument("--hf-config", help="read the HF config.json from this file instead")
    ap.add_argument("--bench-json", help="`switchyard bench-model --json` output: use its hf_config and shape")
    ap.add_argument("--batch", default="1,16", help="batch sizes, comma-separated")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--steps", type=int, default=64, help="timed decode steps")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per case (the median is reported)")
    ap.add_argument("--attn", default="sdpa", help="attn_implementation (sdpa or eager)")
    ap.add_argument("--experts", help="experts_implementation for an MoE shape (eager, grouped_mm, batched_mm; default: HF's)")
    ap.add_argument("--modes", default="eager,compile", help="eager and/or compile")
    ap.add_argument("--out", help="append the JSON lines to this file instead of printing them")
    ap.add_argument("--print-config", action="store_true", help="print the config.json and exit")
    ap.add_argument("--prefill-len", type=int, help="time prefill of a [1, P] prompt instead of decode")
    ap.add_argument("--compile-timeout", type=int, default=240,
                    help="prefill-compile: seconds the first (compiling) call may take before it is abandoned")
    ap.add_argument("--device", default="cuda", help="torch device (cuda; cpu only to try the script on a tiny config)")
    a = ap.parse_args()
    if a.prefill_len is not None and a.prefill_len < 1:
        ap.error("--prefill-len must be at least 1")

    shape, cfg_dict = load_config(a)
    if a.print_config:
        print(json.dumps(cfg_dict, indent=2, sort_keys=True))
        return 0

    import torch
    import transformers
    from transformers import Gemma4ForCausalLM, Gemma4TextConfig

    if a.device == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA device", file=sys.stderr)
        return 1
    dev = torch.device(a.device)
    cfg = Gemma4TextConfig.from_dict({k: v for k, v in cfg_dict.items() if k not in ("architectures", "model_type")})
    cfg._attn_implementation = a.attn
    moe = bool(getattr(cfg, "enable_moe_block", False))
    if moe and a.experts:
        cfg._experts_implementation = a.experts
    # Build straight on the GPU in bf16 (HF's own random init), no host copy.
    torch.manual_seed(0)
    with torch.device(dev):
        prev = torch.get_default_dtype()
        torch.set_default_dtype(torch.bfloat16)
        model = Gemma4ForCausalLM(cfg).eval()
        torch.set_default_dtype(prev)
    # Every parameter once (the LM head is tied to the embedding).
    model_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    experts_impl = getattr(model.config, "_experts_implementation", None) if moe else None
    device = torch.cuda.get_device_name(0) if dev.type == "cuda" else a.device
    log(f"transformers {transformers.__version__}, torch {torch.__version__}, {device}")
    moe_words = (f", MoE {cfg.num_experts} experts top-{cfg.top_k_experts} (moe_intermediate {cfg.moe_intermediate_size}), "
                 f"experts_implementation {experts_impl}") if moe else ""
    log(f"shape {shape}: {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, intermediate {cfg.intermediate_size}, "
        f"vocab {cfg.vocab_size}{moe_words}: {model_bytes / 1e9:.2f} GB bf16 weights; attn_implementation {a.attn}")
    out = open(a.out, "a") if a.out else sys.stdout
    if a.prefill_len is not None:
        return prefill(a, shape, cfg, model, dev, out, dict(
            model_bytes=model_bytes, transformers=transformers.__version__, torch=torch.__version__, device=device,
            experts=experts_impl if moe else None))
    log(f"each sequence: {a.prompt_len} random prompt tokens, then {a.steps} timed decode steps (median of {a.repeats} runs)\n")

    batches = [int(b) for b in a.batch.split(",")]
    rows = []
    for mode in [m.strip() for m in a.modes.split(",") if m.strip()]:
        for b in batches:
            g = torch.Generator(device=dev).manual_seed(b)
            ids = torch.randint(3, cfg.vocab_size, (b, a.prompt_len), device=dev, generator=g)
            mask = torch.ones_like(ids)

            def gen(n):
                kw = dict(
                    max_new_tokens=n, min_new_tokens=n, do_sample=False, cache_implementation="static",
                    eos_token_id=None, pad_token_id=0,
                )
                if mode == "eager":
                    kw["disable_compile"] = True
                torch.cuda.synchronize()
                t = time.perf_counter()
                with torch.no_grad():
                    res = model.generate(ids, attention_mask=mask, **kw)
                torch.cuda.synchronize()
                assert res.shape[1] == a.prompt_len + n, f"generated {res.shape[1] - a.prompt_len} tokens, wanted {n}"
                return time.perf_counter() - t

            row = {
                "shape": shape, "mode": mode, "batch": b, "tokens_per_s": None, "ms_per_step": None,
                "steps": a.steps, "prompt_len": a.prompt_len, "note": None, "error": None,
                "model_bytes": model_bytes, "transformers": transformers.__version__, "torch": torch.__version__,
                "device": device,
            }
            try:
                # Warm-up: allocations, cuBLAS heuristics, and for compile the
                # graph capture (a full-length run so every shape is seen).
                gen(1 + a.steps)
                gen(1)
                note = f"static cache, bf16, {a.attn}"
                if moe:
                    note += f", experts {experts_impl}"
                if mode == "compile":
                    # transformers compiles the decode step itself only when the
                    # model and cache qualify; otherwise this is eager again.
                    compiled = getattr(model, "_compiled_call", None) is not None
                    note += ", decode step torch.compile'd" if compiled else ", NOT compiled (auto-compile criteria unmet): same as eager"
                decode = []
                for _ in range(a.repeats):
                    full, first = gen(1 + a.steps), gen(1)
                    decode.append(full - first)
                d = statistics.median(decode)
                row.update(tokens_per_s=b * a.steps / d, ms_per_step=1e3 * d / a.steps, note=note)
            except Exception as e:  # report and go on: compile may not work everywhere
                row["error"] = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}"
            rows.append(row)
            print(json.dumps(row), file=out, flush=True)
            log(f"  {mode} batch {b}: " + (f"{row['tokens_per_s']:.1f} tokens/s" if row["tokens_per_s"] else f"failed ({row['error']})"))

    log("\n| shape | mode | batch | decode tokens/s | ms/step | note |\n|---|---|---|---|---|---|")
    for r in rows:
        if r["tokens_per_s"] is None:
            log(f"| {shape} | HF {r['mode']} | {r['batch']} | - | - | failed: {r['error']} |")
        else:
            log(f"| {shape} | HF {r['mode']} | {r['batch']} | {r['tokens_per_s']:.1f} | {r['ms_per_step']:.3f} | {r['note']} |")
    return 0


class CompileTimeout(BaseException):
    """Raised by the alarm in the compiling call. A BaseException, as
    KeyboardInterrupt is, so that no `except Exception` on the way (torch's
    compile falls back to eager on many of those) swallows it."""


def prefill(a, shape, cfg, model, dev, out, info):
    """Times one forward of a [1, P] prompt per mode; one JSON line per mode."""
    import torch

    p = a.prefill_len
    log(f"prefill: one random prompt of {p} tokens, one forward (use_cache=False, logits_to_keep=1), "
        f"median of {a.repeats} timed runs after warm-up\n")
    g = torch.Generator(device=dev).manual_seed(p)
    ids = torch.randint(3, cfg.vocab_size, (1, p), device=dev, generator=g)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def timed(fn):
        sync()
        t = time.perf_counter()
        with torch.no_grad():
            logits = fn(input_ids=ids, use_cache=False, logits_to_keep=1).logits
        sync()
        assert logits.shape[1] == 1, f"logits of {logits.shape[1]} rows, wanted the last one only"
        return time.perf_counter() - t

    def on_alarm(signum, frame):
        raise CompileTimeout(f"the compiling call ran past --compile-timeout {a.compile_timeout} s")

    rows = []
    for mode in [m.strip() for m in a.modes.split(",") if m.strip()]:
        row = {
            "shape": shape, "mode": f"prefill-{mode}", "batch": 1, "prefill_len": p, "tokens_per_s": None, "ms": None,
            "ms_min": None, "repeats": a.repeats, "compile_s": None, "note": None, "error": None, **info,
        }
        note = f"bf16, {a.attn}, use_cache=False, logits_to_keep=1"
        if info.get("experts"):
            note += f", experts {info['experts']}"
        try:
            if mode == "eager":
                fn = model
                timed(fn)  # warm-up: allocations, cuBLAS heuristics
            elif mode == "compile":
                fn = torch.compile(model, dynamic=False)
                old = signal.signal(signal.SIGALRM, on_alarm)
                signal.alarm(a.compile_timeout)
                try:
                    row["compile_s"] = timed(fn)  # the compiling call
                finally:
                    signal.alarm(0)
                    signal.signal(signal.SIGALRM, old)
                timed(fn)  # warm-up of the compiled code
                note += f", torch.compile(model, dynamic=False), compiled in {row['compile_s']:.1f} s"
            else:
                raise ValueError(f"unknown mode {mode!r} (eager or compile)")
            runs = [timed(fn) for _ in range(a.repeats)]
            d = statistics.median(runs)
            row.update(tokens_per_s=p / d, ms=1e3 * d, ms_min=1e3 * min(runs), note=note)
        except (Exception, CompileTimeout) as e:  # report and go on: compile may not work everywhere
            row["error"] = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}"
        rows.append(row)
        print(json.dumps(row), file=out, flush=True)
        log(f"  prefill {mode}: " + (f"{row['tokens_per_s']:.0f} tokens/s, {row['ms']:.1f} ms" if row["tokens_per_s"]
                                      else f"failed ({row['error']})"))

    log("\n| shape | mode | prompt tokens | prefill tokens/s | ms | note |\n|---|---|---|---|---|---|")
    for r in rows:
        if r["tokens_per_s"] is None:
            log(f"| {shape} | HF {r['mode']} | {p} | - | - | failed: {r['error']} |")
        else:
            log(f"| {shape} | HF {r['mode']} | {p} | {r['tokens_per_s']:.0f} | {r['ms']:.1f} | {r['note']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
