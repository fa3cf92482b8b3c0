#!/usr/bin/env python3
"""HF transformers decode throughput on the model `switchyard bench-model` times.

Same config (built here exactly as `bench_model::Shape::gemma4` builds it, or
read from `switchyard bench-model --json` output), random bf16 weights on the
GPU, a static KV cache, a random prompt of --prompt-len tokens per sequence,
then greedy decode. Prints decode tokens/s at each batch size for
  - eager: static cache, torch.compile off (generation_config.disable_compile);
  - compile: static cache with transformers' automatic torch.compile of the
    decode step (skipped with the reason if it fails here).

Decode time is measured as the difference between a generate() of 1 + steps
new tokens and one of 1 new token (the prefill and the first token), so the
prompt pass is not counted. Both are run with EOS off, so every step runs.
That matches bench-model, which times decode steps only, each ending in a
device-to-host copy of the chosen tokens (generate() also syncs every step
for its stopping check).

Run on the GPU machine:
    python3 scripts/hf_decode_bench.py                       # 30 layers, hidden 2560, batches 1 and 16
    python3 scripts/hf_decode_bench.py --bench-json out.json # the config from `switchyard bench-model --json > out.json`
    python3 scripts/hf_decode_bench.py --print-config        # the config only (no torch needed)
"""
import argparse
import json
import statistics
import sys
import time


def shape_config(layers, hidden, vocab):
    """The HF config.json of `bench_model::Shape::gemma4(layers, hidden)` with
    `vocab` (mirrors cli/src/bench_model.rs and cli/src/synthetic.rs Spec::config)."""
    heads = max(1, hidden // 320)
    kv = max(1, heads // 2)
    gkv = max(1, heads // 4)
    full = [(i + 1) % 6 == 0 or i + 1 == layers for i in range(layers)]
    return {
        "architectures": ["Gemma4ForCausalLM"],
        "model_type": "gemma4_text",
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": 4 * hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": 256,
        "global_head_dim": 512,
        "num_global_key_value_heads": gkv,
        "hidden_activation": "gelu_pytorch_tanh",
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-6,
        "layer_types": ["full_attention" if f else "sliding_attention" for f in full],
        "sliding_window": 512,
        "final_logit_softcapping": 30.0,
        "attention_k_eq_v": True,
        "attention_bias": False,
        "hidden_size_per_layer_input": 0,
        "vocab_size_per_layer_input": 0,
        "num_kv_shared_layers": 0,
        "use_double_wide_mlp": False,
        "tie_word_embeddings": True,
        "pad_token_id": 0,
        "eos_token_id": 1,
        "bos_token_id": 2,
        "enable_moe_block": False,
        "num_experts": None,
        "top_k_experts": None,
        "moe_intermediate_size": None,
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0},
        },
        "dtype": "bfloat16",
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--hidden", type=int, default=2560)
    ap.add_argument("--vocab", type=int, default=262144)
    ap.add_argument("--bench-json", help="`switchyard bench-model --json` output: use its hf_config")
    ap.add_argument("--batch", default="1,16", help="batch sizes, comma-separated")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--steps", type=int, default=64, help="timed decode steps")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per case (the median is reported)")
    ap.add_argument("--attn", default="sdpa", help="attn_implementation (sdpa or eager)")
    ap.add_argument("--modes", default="eager,compile", help="eager and/or compile")
    ap.add_argument("--print-config", action="store_true", help="print the config.json and exit")
    a = ap.parse_args()

    if a.bench_json:
        with open(a.bench_json) as f:
            cfg_dict = json.load(f)["hf_config"]
    else:
        cfg_dict = shape_config(a.layers, a.hidden, a.vocab)
    if a.print_config:
        print(json.dumps(cfg_dict, indent=2, sort_keys=True))
        return 0

    import torch
    import transformers
    from transformers import Gemma4ForCausalLM, Gemma4TextConfig

    if not torch.cuda.is_available():
        print("error: no CUDA device", file=sys.stderr)
        return 1
    dev = torch.device("cuda")
    cfg = Gemma4TextConfig.from_dict({k: v for k, v in cfg_dict.items() if k not in ("architectures", "model_type")})
    cfg._attn_implementation = a.attn
    # Build straight on the GPU in bf16 (HF's own random init), no host copy.
    torch.manual_seed(0)
    with torch.device(dev):
        prev = torch.get_default_dtype()
        torch.set_default_dtype(torch.bfloat16)
        model = Gemma4ForCausalLM(cfg).eval()
        torch.set_default_dtype(prev)
    # Every parameter once (the LM head is tied to the embedding).
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    print(f"model: {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, intermediate {cfg.intermediate_size}, "
          f"vocab {cfg.vocab_size}: {weight_bytes / 1e9:.2f} GB bf16 weights; attn_implementation {a.attn}")
    print(f"each sequence: {a.prompt_len} random prompt tokens, then {a.steps} timed decode steps (median of {a.repeats} runs)\n")

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
                    out = model.generate(ids, attention_mask=mask, **kw)
                torch.cuda.synchronize()
                assert out.shape[1] == a.prompt_len + n, f"generated {out.shape[1] - a.prompt_len} tokens, wanted {n}"
                return time.perf_counter() - t

            try:
                # Warm-up: allocations, cuBLAS heuristics, and for compile the
                # graph capture (a full-length run so every shape is seen).
                gen(1 + a.steps)
                gen(1)
                note = f"static cache, bf16, {a.attn}"
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
                tps = b * a.steps / d
                rows.append((mode, b, tps, 1e3 * d / a.steps, note))
            except Exception as e:  # report and go on: compile may not work everywhere
                rows.append((mode, b, None, None, f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}"))
            print(f"  {mode} batch {b}: " + (f"{rows[-1][2]:.1f} tokens/s" if rows[-1][2] else f"failed ({rows[-1][4]})"), flush=True)

    print("\n| mode | batch | decode tokens/s | ms/step | note |\n|---|---|---|---|---|")
    # The last field is the failure when tps is None, else the note.
    for mode, b, tps, ms, err in rows:
        if tps is None:
            print(f"| HF {mode} | {b} | - | - | failed: {err} |")
        else:
            print(f"| HF {mode} | {b} | {tps:.1f} | {ms:.3f} | {err} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
