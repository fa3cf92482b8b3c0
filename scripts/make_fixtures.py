#!/usr/bin/env python3
"""Builds tiny random Gemma 4 text checkpoints and records HF transformers'
f32 eager greedy generation as the oracle for Switchyard's model parity tests.

Run on a machine with torch and transformers 5.x (f32 eager on the CPU is
the oracle, so any machine with them will do):
    python3 scripts/make_fixtures.py OUT_DIR [NAME ...]
Writes OUT_DIR/<name>/{config.json, model.safetensors, expected.json} for
every fixture, or only the NAMEs given (each keeps its own seed, so adding a
fixture never changes the others).

Weights are random, stored in bf16 (the f32 model runs the same bf16 values
upcast, so the oracle and the engine share weights exactly), and scaled so the
logits have real margins. expected.json holds the prompt, the greedy tokens,
the per-step f32 logits that chose them, and each step's top-2 margin.
"""
import json
import os
import sys

import torch
import transformers
from transformers import Gemma4ForCausalLM, Gemma4TextConfig

PROMPT = [2, 17, 99, 5, 250, 31]
NEW_TOKENS = 10

FIXTURES = {
    # MoE, k_eq_v on full layers, final softcap, sliding window (4) shorter
    # than the run (16 tokens), proportional RoPE on full layers.
    "tiny-moe": dict(
        vocab_size=512, hidden_size=128, intermediate_size=128, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        global_head_dim=64, num_global_key_value_heads=1, attention_k_eq_v=True,
        layer_types=["sliding_attention", "sliding_attention", "full_attention", "full_attention"],
        sliding_window=4, final_logit_softcapping=30.0,
        enable_moe_block=True, num_experts=8, top_k_experts=2, moe_intermediate_size=32,
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0},
        },
    ),
    # Dense, separate V projection, no softcap, window longer than the prompt.
    "tiny-dense": dict(
        vocab_size=384, hidden_size=96, intermediate_size=192, num_hidden_layers=3,
        num_attention_heads=2, num_key_value_heads=1, head_dim=48,
        global_head_dim=48, attention_k_eq_v=False,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"],
        sliding_window=8, final_logit_softcapping=None, enable_moe_block=False,
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.5, "rope_theta": 1000000.0},
        },
    ),
    # The flag sets of the released checkpoints, shrunk (release configs in
    # tests/data/release-configs). Sliding window 4 is shorter than the run.
    #
    # E2B: per-layer inputs, KV sharing on the last layers (here 3 of 6: two
    # sliding layers read layer 1's KV, the last full layer reads layer 2's),
    # double-wide MLP on those shared layers, no k_eq_v, softcap 30.
    "tiny-e2b": dict(
        vocab_size=384, hidden_size=64, intermediate_size=96, num_hidden_layers=6,
        num_attention_heads=2, num_key_value_heads=1, head_dim=32,
        global_head_dim=64, attention_k_eq_v=False,
        layer_types=["sliding_attention", "sliding_attention", "full_attention",
                     "sliding_attention", "sliding_attention", "full_attention"],
        sliding_window=4, final_logit_softcapping=30.0, enable_moe_block=False,
        hidden_size_per_layer_input=16, vocab_size_per_layer_input=384,
        num_kv_shared_layers=3, use_double_wide_mlp=True,
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0},
        },
    ),
    # E4B: as E2B without the double-wide MLP; two KV heads; the shared band
    # (last 3 of 7) starts inside a sliding run.
    "tiny-e4b": dict(
        vocab_size=384, hidden_size=64, intermediate_size=128, num_hidden_layers=7,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        global_head_dim=32, attention_k_eq_v=False,
        layer_types=["sliding_attention", "sliding_attention", "full_attention",
                     "sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
        sliding_window=4, final_logit_softcapping=30.0, enable_moe_block=False,
        hidden_size_per_layer_input=16, vocab_size_per_layer_input=384,
        num_kv_shared_layers=3, use_double_wide_mlp=False,
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0},
        },
    ),
    # 26B-A4B: MoE beside the dense MLP, k_eq_v on full layers with fewer
    # global KV heads and a double global head_dim, softcap 30, no per-layer
    # inputs, no KV sharing, five sliding layers then a full one.
    "tiny-26b-a4b": dict(
        vocab_size=512, hidden_size=64, intermediate_size=64, num_hidden_layers=6,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        global_head_dim=32, num_global_key_value_heads=1, attention_k_eq_v=True,
        layer_types=["sliding_attention"] * 5 + ["full_attention"],
        sliding_window=4, final_logit_softcapping=30.0,
        enable_moe_block=True, num_experts=8, top_k_experts=2, moe_intermediate_size=32,
        use_bidirectional_attention="vision",
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0},
        },
    ),
    # 31B: dense, k_eq_v on full layers with fewer global KV heads, softcap
    # 30, no per-layer inputs, no KV sharing.
    "tiny-31b": dict(
        vocab_size=384, hidden_size=96, intermediate_size=192, num_hidden_layers=6,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        global_head_dim=32, num_global_key_value_heads=1, attention_k_eq_v=True,
        layer_types=["sliding_attention"] * 5 + ["full_attention"],
        sliding_window=4, final_logit_softcapping=30.0, enable_moe_block=False,
        use_bidirectional_attention="vision",
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0},
        },
    ),
}

COMMON = dict(
    hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6, max_position_embeddings=256,
    hidden_size_per_layer_input=0, vocab_size_per_layer_input=0, num_kv_shared_layers=0,
    use_double_wide_mlp=False, tie_word_embeddings=True, pad_token_id=0, eos_token_id=1, bos_token_id=2,
    attention_bias=False,
)


# Weight scales: the embedding's std and the range of the post-sublayer norm
# weights. Together they set how much the layers, against the token's own
# embedding, decide the output (too little: every step repeats the last
# prompt token; too much: the f32 oracle and a bf16 engine drift apart).
EMBED_STD = float(os.environ.get("FIXTURE_EMBED_STD", "0.4"))
POST_LO, POST_HI = (float(x) for x in os.environ.get("FIXTURE_POST_RANGE", "0.6,1.4").split(","))


def randomise(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("embed_tokens.weight"):
                # Tied with the LM head. Small enough that the scaled embedding
                # does not drown the layers (at 0.5 every fixture just repeated
                # its last prompt token), large enough for logit margins.
                v = torch.randn(p.shape, generator=g) * EMBED_STD
            elif p.dim() == 1 and "post_" in name:
                # Post-sublayer norms set how loudly each sublayer speaks into
                # the residual stream.
                v = POST_LO + (POST_HI - POST_LO) * torch.rand(p.shape, generator=g)
            elif p.dim() == 1:
                # Norm weights, router scales: around 1 so every one is exercised.
                v = 0.6 + 0.8 * torch.rand(p.shape, generator=g)
            else:
                fan_in = p.shape[-1]
                v = torch.randn(p.shape, generator=g) * (1.0 / fan_in) ** 0.5
                if name.endswith("router.proj.weight"):
                    # Decisive routing: top-k choices far from ties, so bf16
                    # rounding in an engine cannot flip an expert the f32
                    # oracle picked (a flip is a discontinuity, not an error).
                    v = v * 8.0
            p.copy_(v.to(torch.bfloat16).to(torch.float32))
        for name, b in model.named_buffers():
            if name.endswith("layer_scalar"):
                b.copy_((0.7 + 0.6 * torch.rand(b.shape, generator=g)).to(torch.bfloat16).to(torch.float32))


def build(name, spec, out_dir, seed):
    cfg = Gemma4TextConfig(**{**COMMON, **spec})
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = Gemma4ForCausalLM(cfg).to(torch.float32).eval()
    randomise(model, seed)
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(d, safe_serialization=True)
    model.to(torch.float32)
    # Reload exactly as a user would, in f32 eager, and generate greedily.
    ref = Gemma4ForCausalLM.from_pretrained(d, torch_dtype=torch.float32, attn_implementation="eager").eval()
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        out = ref.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False, output_logits=True,
                           return_dict_in_generate=True, eos_token_id=None, pad_token_id=0)
    tokens = out.sequences[0, len(PROMPT):].tolist()
    logits = [l[0].float().tolist() for l in out.logits]
    margins = []
    for l in out.logits:
        top2 = torch.topk(l[0].float(), 2).values
        margins.append(float(top2[0] - top2[1]))
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump({"transformers": transformers.__version__, "torch": torch.__version__, "prompt": PROMPT,
                   "tokens": tokens, "top2_margin": margins, "logits": logits}, f)
    print(f"{name}: tokens {tokens}; min top-2 margin {min(margins):.3f}; "
          f"files {sorted(os.listdir(d))}; sizes {[os.path.getsize(os.path.join(d, x)) for x in sorted(os.listdir(d))]}")
    with open(os.path.join(d, "config.json")) as f:
        print(f.read())


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures"
    only = set(sys.argv[2:])
    unknown = only - set(FIXTURES)
    if unknown:
        sys.exit(f"unknown fixture(s) {sorted(unknown)}; known: {sorted(FIXTURES)}")
    for i, (name, spec) in enumerate(FIXTURES.items()):
        if not only or name in only:
            build(name, spec, out_dir, seed=1234 + i)


if __name__ == "__main__":
    main()
