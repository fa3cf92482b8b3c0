#!/usr/bin/env python3
"""Writes the seed corpora for the fuzz targets (run from the repo root).

checkpoint_loader seeds: byte 0 = quant mode (0 none, 1 fp8-embed, 2 nvfp4),
then config.json text, a NUL byte, then a safetensors file. Micro models
that load successfully (dense and MoE, BF16/F16/F32) give the fuzzer the
whole path to mutate; the tiny-dense fixture's config with truncated and
damaged safetensors headers seeds the error paths.

launch_validator seeds are short random byte strings: the harness reads
every decision from the input, so any bytes describe a case.
"""
import json, os, random, struct

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
rng = random.Random(5)


def bf16(vals):
    out = bytearray()
    for v in vals:
        b = struct.unpack("<I", struct.pack("<f", v))[0]
        out += struct.pack("<H", (b + 0x7FFF + ((b >> 16) & 1)) >> 16)
    return bytes(out)


def enc(dtype, n):
    vals = [rng.uniform(-1, 1) for _ in range(n)]
    if dtype == "BF16":
        return bf16(vals)
    if dtype == "F16":
        return struct.pack(f"<{n}e", *vals)
    return struct.pack(f"<{n}f", *vals)


def safetensors(tensors, dtype="BF16"):
    header, data = {}, bytearray()
    for name, shape in tensors:
        n = 1
        for s in shape:
            n *= s
        d = "F32" if name.endswith("layer_scalar") or name.endswith("per_expert_scale") else dtype
        raw = enc(d, n)
        header[name] = {"dtype": d, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + bytes(data)


def micro(moe, layers=2):
    v, h, i, hd, nh, nkv = 16, 16, 16, 8, 2, 1
    cfg = {
        "model_type": "gemma4_text", "vocab_size": v, "hidden_size": h, "intermediate_size": i,
        "num_hidden_layers": layers, "num_attention_heads": nh, "num_key_value_heads": nkv, "head_dim": hd,
        "hidden_size_per_layer_input": 0, "per_layer_config": {}, "sliding_window": 4,
        "layer_types": ["sliding_attention"] * (layers - 1) + ["full_attention"], "eos_token_id": 1,
        "final_logit_softcapping": 30.0,
    }
    t = [("model.embed_tokens.weight", [v, h]), ("model.norm.weight", [h])]
    for l in range(layers):
        p = f"model.layers.{l}."
        for n in ["input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"]:
            t.append((p + n + ".weight", [h]))
        t += [(p + "layer_scalar", [1]), (p + "mlp.gate_proj.weight", [i, h]), (p + "mlp.up_proj.weight", [i, h]),
              (p + "mlp.down_proj.weight", [h, i]), (p + "self_attn.q_proj.weight", [nh * hd, h]),
              (p + "self_attn.k_proj.weight", [nkv * hd, h]), (p + "self_attn.v_proj.weight", [nkv * hd, h]),
              (p + "self_attn.o_proj.weight", [h, nh * hd]), (p + "self_attn.q_norm.weight", [hd]),
              (p + "self_attn.k_norm.weight", [hd])]
        if moe:
            e, im = 2, 16
            t += [(p + "router.scale", [h]), (p + "router.proj.weight", [e, h]), (p + "router.per_expert_scale", [e]),
                  (p + "pre_feedforward_layernorm_2.weight", [h]), (p + "post_feedforward_layernorm_1.weight", [h]),
                  (p + "post_feedforward_layernorm_2.weight", [h]), (p + "experts.gate_up_proj", [e, 2 * im, h]),
                  (p + "experts.down_proj", [e, h, im])]
    if moe:
        cfg.update({"enable_moe_block": True, "num_experts": 2, "top_k_experts": 1, "moe_intermediate_size": 16})
    return json.dumps(cfg, indent=1), t


def write(name, quant, config, st):
    with open(os.path.join(root, "checkpoint_loader", name), "wb") as f:
        f.write(bytes([quant]) + config.encode() + b"\0" + st)


os.makedirs(os.path.join(root, "checkpoint_loader"), exist_ok=True)
os.makedirs(os.path.join(root, "launch_validator"), exist_ok=True)
for moe in (False, True):
    cfg, t = micro(moe)
    kind = "moe" if moe else "dense"
    for q in range(3):
        write(f"micro-{kind}-bf16-q{q}", q, cfg, safetensors(t))
    write(f"micro-{kind}-f32", 0, cfg, safetensors(t, "F32"))
    write(f"micro-{kind}-f16", 2, cfg, safetensors(t, "F16"))
    good = safetensors(t)
    write(f"micro-{kind}-truncated", 0, cfg, good[:-7])
    write(f"micro-{kind}-missing-tensor", 0, cfg, safetensors(t[:-1]))
    bad_shape = [(n, s if n != "model.norm.weight" else [s[0] + 2]) for n, s in t]
    write(f"micro-{kind}-wrong-shape", 0, cfg, safetensors(bad_shape))

# The tiny-dense fixture's config with damaged copies of its safetensors header.
fx = os.path.join(os.path.dirname(root), "..", "tests", "fixtures", "tiny-dense")
cfg = open(os.path.join(fx, "config.json")).read()
st = open(os.path.join(fx, "model.safetensors"), "rb").read()
n = struct.unpack("<Q", st[:8])[0]
head = st[: 8 + n]
write("tiny-dense-header-only", 0, cfg, head)
write("tiny-dense-header-cut", 0, cfg, st[: 8 + n // 2])
write("tiny-dense-len-only", 0, cfg, st[:8])
write("tiny-dense-huge-len", 0, cfg, struct.pack("<Q", 1 << 40) + head[8:])
write("tiny-dense-bad-dtype", 0, cfg, head.replace(b'"BF16"', b'"I64" ', 1) + st[8 + n : 8 + n + 4096])
big = json.loads(cfg)
big["hidden_size"] = 10**9
# Absurd sizes against a complete (micro) safetensors file, so that parsing
# succeeds and the config's claims are what gets refused.
micro_st = safetensors(micro(False)[1])
write("tiny-dense-hidden-1e9", 0, json.dumps(big), micro_st)
big = json.loads(cfg)
big["num_hidden_layers"] = 10**9
big.pop("layer_types")
write("tiny-dense-layers-1e9", 0, json.dumps(big), micro_st)
write("micro-no-config", 0, "", micro_st)

for k in range(16):
    with open(os.path.join(root, "launch_validator", f"seed-{k:02}"), "wb") as f:
        f.write(bytes(rng.randrange(256) for _ in range(rng.randrange(16, 200))))
