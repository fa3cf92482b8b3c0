#!/usr/bin/env python3
"""Writes the seed corpora for the fuzz targets (run from the repo root).

checkpoint_loader seeds: byte 0 = quant mode (0 none, 1 fp8-embed, 2 nvfp4),
byte 1 = generate flags (bit 0 --json, bit 1 --ignore-eos, bit 2 no
--prompt-ids), then the --prompt-ids text, the --max-new-tokens text and the
config.json text, each ended by a NUL byte, then a safetensors file. Micro
models that load successfully (dense and MoE, BF16/F16/F32) give the fuzzer
the whole path to mutate, generation included; the tiny-dense fixture's
config with truncated and damaged safetensors headers seeds the error paths;
`gen-*` seeds put generate's flags at their edges (past the context, past the
vocabulary, at 2^64, escape sequences).

config_json seeds: config.json files alone (the fixtures', the micro models',
and hostile ones: duplicate keys, per-layer keys naming one layer twice,
values f32 cannot hold, escape sequences, a 2^64 context).

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


def write(name, quant, config, st, prompt="1,2,3", max_new="3", flags=1):
    with open(os.path.join(root, "checkpoint_loader", name), "wb") as f:
        f.write(bytes([quant, flags]) + prompt.encode() + b"\0" + max_new.encode() + b"\0" + config.encode() + b"\0" + st)


def write_config(name, text):
    with open(os.path.join(root, "config_json", name), "wb") as f:
        f.write(text.encode() if isinstance(text, str) else text)


os.makedirs(os.path.join(root, "checkpoint_loader"), exist_ok=True)
os.makedirs(os.path.join(root, "launch_validator"), exist_ok=True)
os.makedirs(os.path.join(root, "config_json"), exist_ok=True)
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

# After the launch seeds, so that adding these left those unchanged.
# generate's flags at their edges, on the micro dense model (vocab 16) with
# a 32-position context.
cfg, t = micro(False)
small = json.loads(cfg)
small["max_position_embeddings"] = 32
small = json.dumps(small, indent=1)
good = safetensors(t)
write("gen-ok-ignore-eos", 0, small, good, "1,2,3", "8", flags=3)
write("gen-default-prompt", 0, small, good, "", "2", flags=4)
write("gen-past-context", 0, small, good, ",".join(["1"] * 30), "3")
write("gen-prompt-past-context", 0, small, good, ",".join(["1"] * 33), "1")
write("gen-max-new-2^59", 0, small, good, "1", str(1 << 59))
write("gen-max-new-u64-max", 0, small, good, "1", str(2**64 - 1))
write("gen-max-new-2^64", 0, small, good, "1", str(2**64))
write("gen-max-new-zero", 0, small, good, "1", "0")
write("gen-id-past-vocab", 0, small, good, "1,16", "1")
write("gen-id-u32-max", 0, small, good, "4294967295", "1")
write("gen-prompt-escapes", 0, small, good, "1,\x1b]0;pwned\x07", "1")
write("gen-max-new-escapes", 0, small, good, "1", "\x1b[2J")
huge = json.loads(small)
huge["max_position_embeddings"] = 2**64 - 1
write("gen-context-2^64", 0, json.dumps(huge), good, "1", str(1 << 59), flags=3)

# config.json alone.
fixtures = os.path.join(os.path.dirname(root), "..", "tests", "fixtures")
for fx_name in ("tiny-dense", "tiny-moe"):
    write_config(fx_name, open(os.path.join(fixtures, fx_name, "config.json")).read())
write_config("micro-dense", micro(False)[0])
write_config("micro-moe", micro(True)[0])
base = json.loads(open(os.path.join(fixtures, "tiny-dense", "config.json")).read())


def variant(name, **changes):
    c = dict(base)
    for k, v in changes.items():
        if v is None:
            c.pop(k, None)
        else:
            c[k] = v
    write_config(name, json.dumps(c, indent=1))


variant("global-head-dim-44", per_layer_config=None, global_head_dim=44)
variant("global-kv-heads-3", per_layer_config=None, attention_k_eq_v=True, num_global_key_value_heads=3)
variant("per-layer-1-and-01", per_layer_config={"1": {"head_dim": 48}, "01": {"head_dim": 48}})
variant("per-layer-plus-key", per_layer_config={"+1": {"head_dim": 48}})
variant("rope-theta-1e-50", rope_parameters={"rope_type": "default", "rope_theta": 1e-50})
variant("rope-theta-1e-37", rope_parameters={"rope_type": "default", "rope_theta": 1e-37})
variant("softcap-1e300", final_logit_softcapping=1e300)
variant("context-zero", max_position_embeddings=0)
variant("context-2^64", max_position_embeddings=2**64 - 1)
variant("heads-2^62", num_attention_heads=2**62)
variant("escapes", model_type="\x1b]0;pwned\x07\x1b[2J\u009b31m\u202e")
variant("wrapped", model_type="gemma4", text_config=dict(base))
write_config("duplicate-key", json.dumps(base, indent=1).replace('"hidden_size": 96,', '"hidden_size": 96, "hidden_size": 128,', 1))
write_config("not-utf8", b'{"model_type": "\xff"}')
write_config("deep", "[" * 200 + "]" * 200)
