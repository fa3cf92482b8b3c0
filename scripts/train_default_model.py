#!/usr/bin/env python3
"""Trains the model built into the `switchyard` binary: a tiny Gemma 4 text
decoder (HF transformers 5.x `Gemma4ForCausalLM`) with its own tokenizer,
trained on the docstrings and comments of the Python standard library (the
running interpreter's), so that a bare `cargo run --release` prints readable
text generated from a text prompt.

    python3 scripts/train_default_model.py --out model/default --minutes 35
    python3 scripts/train_default_model.py --out DIR --device cuda --minutes 20
    python3 scripts/train_default_model.py --out DIR2 --init DIR --seed 2 --minutes 30   # train DIR's model further

Steps, all seeded (--seed):
1. The corpus: every docstring (`ast`) and comment block (`tokenize`) of the
   stdlib's modules, test suites left out, deduplicated. One in eight
   function/class docstrings is also written as a chat exchange (the user
   asks what `module.name` does, the model answers with the docstring) so
   that the chat template means something to the model.
2. The tokenizer, with the HF `tokenizers` library, in Gemma's shape: BPE
   with byte fallback (`<0x00>`..`<0xFF>` right after the special tokens),
   `▁` for spaces, `<bos>` put in front by the post-processor, special
   tokens `<pad>`=0 `<eos>`=1 `<bos>`=2 `<unk>`=3 and Gemma 4's turn markers
   `<|turn>`=4 `<turn|>`=5.
3. The model, trained in f32 with AdamW on random windows of the packed
   token stream (`<bos> doc <eos> <bos> doc <eos> ...`) until the time box
   (--minutes) runs out; the learning-rate schedule follows the elapsed
   fraction of the box, so a run is reproducible in its data order and
   initialisation, not in its step count.
4. The artifacts, in --out: config.json and model.safetensors (bf16; the
   size is checked against --max-mb), tokenizer.json, tokenizer_config.json,
   chat_template.jinja, generation_config.json, and expected.json: HF's
   f32 eager greedy continuation of the default prompt (the bf16 weights
   reloaded as a user would), in the format of tests/fixtures/*/expected.json
   (prompt, tokens, top2_margin, per-step logits) plus the prompt's text and
   the continuation's text.

The model's config is one Switchyard's loader accepts: dense MLP, no
per-layer inputs, no KV sharing, tied embeddings, sliding and full layers.
"""
import argparse
import ast
import io
import json
import math
import os
import random
import sys
import sysconfig
import time
import tokenize

import torch

SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<|turn>", "<turn|>"]
PAD, EOS, BOS, UNK, TURN_OPEN, TURN_CLOSE = range(6)
BYTE_BASE = len(SPECIALS)

# The prompt of the default run (and of expected.json). A docstring's usual
# opening, so the model continues in the register it was trained on.
DEFAULT_PROMPT = "Return a"

# Sizes. Small enough to train on two CPU cores in half an hour and stay
# well under 8 MB in bf16 (the embedding dominates: vocab x hidden).
SIZES = {
    # 1.40M parameters, 2.8 MB in bf16 (the full-attention layer takes
    # Gemma 4's default global head_dim, 512): what a shared two-core CPU
    # trains in about an hour (~500 tokens/s measured there).
    "tiny": dict(hidden_size=128, intermediate_size=384, num_hidden_layers=4, num_attention_heads=2,
                 num_key_value_heads=1, head_dim=64),
    # ~2.9M parameters, under 6 MB in bf16 at the default vocabulary: the
    # default on a GPU.
    "small": dict(hidden_size=192, intermediate_size=512, num_hidden_layers=4, num_attention_heads=3,
                  num_key_value_heads=1, head_dim=64),
}

CHAT_TEMPLATE = """{#- Gemma 4's turn format: <|turn>role ... <turn|>, "assistant" spelled "model".
    The default model saw user questions about stdlib names answered with docstrings. -#}
{{- bos_token -}}
{%- set loop_messages = messages -%}
{%- if messages and messages[0]['role'] in ['system', 'developer'] -%}
    {{- '<|turn>system\\n' + messages[0]['content'] | trim + '<turn|>\\n' -}}
    {%- set loop_messages = messages[1:] -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}
    {%- if role not in ['user', 'model'] -%}
        {{- raise_exception('Unknown role: ' + message['role']) -}}
    {%- endif -%}
    {%- if (role == 'user') != (loop.index0 % 2 == 0) -%}
        {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') -}}
    {%- endif -%}
    {{- '<|turn>' + role + '\\n' + message['content'] | trim + '<turn|>\\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|turn>model\\n' -}}
{%- endif -%}
"""


def log(msg):
    print(msg, flush=True)


# ---------------------------------------------------------------- corpus

SKIP_DIRS = {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__", "test_asyncio"}


def stdlib_files():
    root = sysconfig.get_paths()["stdlib"]
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and not x.startswith("test_"))
        for f in sorted(files):
            if f.endswith(".py") and not f.startswith("test_"):
                out.append(os.path.join(d, f))
    return root, out


def module_name(root, path):
    rel = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
    return rel[: -len(".__init__")] if rel.endswith(".__init__") else rel


def comment_blocks(src):
    """Runs of consecutive full-line comments, as paragraphs of text."""
    blocks, cur, last_line = [], [], -2
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(src).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return []
    for t in toks:
        if t.type != tokenize.COMMENT:
            continue
        text = t.string.lstrip("#").strip()
        line = t.start[0]
        # Shebangs, encodings, linters' and type checkers' pragmas, rules.
        if (line <= 2 and ("coding" in text or text.startswith("!"))) or text.startswith(("noqa", "type:", "pragma", "fmt:", "pylint")):
            continue
        if line != last_line + 1 and cur:
            blocks.append(cur)
            cur = []
        if text and any(c.isalpha() for c in text):
            cur.append(text)
        last_line = line
    if cur:
        blocks.append(cur)
    out = []
    for b in blocks:
        text = " ".join(b)
        # Commented-out code and licence boilerplate teach the model nothing readable.
        if len(text) < 24 or "copyright" in text.lower() or "license" in text.lower():
            continue
        if sum(c in "=()[]{};" for c in text) > len(text) / 12:
            continue
        out.append(text)
    return out


def corpus(seed):
    root, files = stdlib_files()
    rng = random.Random(seed)
    docs, seen, chats = [], set(), 0
    for path in files:
        try:
            with open(path, encoding="utf-8") as f:
                src = f.read()
            tree = ast.parse(src)
        except (UnicodeDecodeError, SyntaxError, ValueError):
            continue
        mod = module_name(root, path)

        def add(text, name=None):
            nonlocal chats
            text = text.strip()
            if len(text) < 16 or text in seen:
                return
            seen.add(text)
            docs.append(text)
            if name is not None and rng.random() < 0.125:
                chats += 1
                docs.append(("chat", f"What does {name} do?", text))

        def visit(node, prefix):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    name = f"{prefix}.{child.name}"
                    doc = ast.get_docstring(child)
                    if doc:
                        add(doc, name if not child.name.startswith("_") else None)
                    visit(child, name)

        doc = ast.get_docstring(tree)
        if doc:
            add(doc)
        visit(tree, mod)
        if mod == "pydoc_data.topics":
            # The language reference's topics, as pydoc's help() shows them:
            # a dict of long strings, the most prose the stdlib ships.
            for node in ast.walk(tree):
                if isinstance(node, ast.Dict):
                    for v in node.values:
                        if isinstance(v, ast.Constant) and isinstance(v.value, str):
                            for para in v.value.split("\n\n"):
                                add(para)
        for c in comment_blocks(src):
            add(c)
    texts = [d for d in docs if isinstance(d, str)]
    log(f"corpus: {len(files)} files under {root}; {len(texts)} docstrings and comment blocks "
        f"({sum(len(t) for t in texts) / 1e6:.1f} M characters), {chats} also as chat exchanges")
    return docs


def render(doc):
    """A document as the text the model reads (BOS/EOS added as ids)."""
    if isinstance(doc, str):
        return doc
    _, q, a = doc
    return f"<|turn>user\n{q}<turn|>\n<|turn>model\n{a}<turn|>\n"


# ---------------------------------------------------------------- tokenizer

def train_tokenizer(docs, vocab_size):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    # Gemma's own tokenizer has no pre-tokenizer (merges may span words); a
    # vocabulary this small is better spent on words, so pieces split before
    # each run of spaces, at newlines, and between digits.
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex("▁+"), behavior="merged_with_next"),
        pre_tokenizers.Split(Regex("\n+"), behavior="isolated"),
        pre_tokenizers.Digits(individual_digits=True),
    ])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - 256, special_tokens=SPECIALS, limit_alphabet=160, show_progress=False,
    )
    tok.train_from_iterator((render(d) for d in docs), trainer=trainer)
    # Put the 256 byte tokens right after the special tokens, as Gemma's
    # vocabulary has them, and renumber the learned tokens after them.
    j = json.loads(tok.to_str())
    learned = sorted(j["model"]["vocab"].items(), key=lambda kv: kv[1])
    vocab = {s: i for i, s in enumerate(SPECIALS)}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = BYTE_BASE + b
    for s, _ in learned:
        if s not in vocab:
            vocab[s] = len(vocab)
    j["model"]["vocab"] = vocab
    j["model"]["byte_fallback"] = True
    for t in j["added_tokens"]:
        assert vocab[t["content"]] == t["id"], t
    j["post_processor"] = json.loads(processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", BOS)]).__getstate__())
    tok = Tokenizer.from_str(json.dumps(j))
    assert tok.get_vocab_size() == len(vocab), (tok.get_vocab_size(), len(vocab))
    for s in ["Return the number of bytes.", "naïve café — 100%", "<|turn>user\nhi<turn|>"]:
        ids = tok.encode(s, add_special_tokens=False).ids
        assert tok.decode(ids, skip_special_tokens=False) == s, (s, ids, tok.decode(ids))
    return tok


def encode_corpus(tok, docs, rng):
    order = list(range(len(docs)))
    rng.shuffle(order)
    ids = []
    for i in order:
        ids.append(BOS)
        ids.extend(tok.encode(render(docs[i]), add_special_tokens=False).ids)
        ids.append(EOS)
    return torch.tensor(ids, dtype=torch.long)


# ---------------------------------------------------------------- model

def make_config(size, vocab_size, context):
    from transformers import Gemma4TextConfig

    spec = SIZES[size]
    n = spec["num_hidden_layers"]
    # Gemma 4's pattern: sliding layers with a full-attention layer last.
    layer_types = ["sliding_attention"] * (n - 1) + ["full_attention"]
    cfg = Gemma4TextConfig(
        vocab_size=vocab_size, **spec, attention_k_eq_v=False,
        layer_types=layer_types, sliding_window=64, final_logit_softcapping=30.0, enable_moe_block=False,
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0},
        },
        hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6, max_position_embeddings=context,
        hidden_size_per_layer_input=0, vocab_size_per_layer_input=0, num_kv_shared_layers=0,
        use_double_wide_mlp=False, tie_word_embeddings=True, pad_token_id=PAD, eos_token_id=EOS, bos_token_id=BOS,
        attention_bias=False, attention_dropout=0.0,
    )
    return cfg


def lr_at(frac, peak, warmup_frac=0.03, floor=0.1):
    if frac < warmup_frac:
        return peak * frac / warmup_frac
    t = min(1.0, (frac - warmup_frac) / (1 - warmup_frac))
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * t)))


def train(model, data, args, device):
    n_val = max(len(data) // 50, args.context * 8)
    val, train_data = data[:n_val], data[n_val:]
    g = torch.Generator().manual_seed(args.seed)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)

    def batch(src, gen):
        starts = torch.randint(0, len(src) - args.context - 1, (args.batch,), generator=gen)
        x = torch.stack([src[s: s + args.context + 1] for s in starts.tolist()]).to(device)
        return x[:, :-1], x[:, 1:]

    def val_loss():
        model.eval()
        vg = torch.Generator().manual_seed(0)
        tot = 0.0
        with torch.no_grad():
            for _ in range(8):
                x, y = batch(val, vg)
                logits = model(input_ids=x).logits
                tot += torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1)).item()
        model.train()
        return tot / 8

    budget = args.minutes * 60.0
    t0 = time.time()
    step, tokens = 0, 0
    model.train()
    last_log = last_eval = t0
    # The corpus is small (a few million tokens), so a long run overfits:
    # keep the weights with the lowest held-out loss.
    best = (float("inf"), None, 0)
    while True:
        frac = (time.time() - t0) / budget
        if time.time() - last_eval > args.eval_every or frac >= 1.0:
            last_eval = time.time()
            vl = val_loss()
            if vl < best[0]:
                best = (vl, {k: v.detach().clone() for k, v in model.state_dict().items()}, step)
            log(f"step {step}  held-out loss {vl:.3f} (best {best[0]:.3f} at step {best[2]})")
        if frac >= 1.0:
            break
        for grp in opt.param_groups:
            grp["lr"] = lr_at(frac, args.lr)
        x, y = batch(train_data, g)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tokens += x.numel()
        now = time.time()
        if now - last_log > args.log_every or step == 1:
            last_log = now
            log(f"step {step}  {now - t0:6.0f}s  lr {opt.param_groups[0]['lr']:.2e}  loss {loss.item():.3f}  "
                f"{tokens / (now - t0):.0f} tok/s  ({tokens / 1e6:.2f} M tokens, {tokens / len(train_data):.2f} epochs)")
    vl, state, best_step = best
    model.load_state_dict(state)
    log(f"trained {step} steps, {tokens / 1e6:.2f} M tokens ({tokens / len(train_data):.1f} epochs) in "
        f"{time.time() - t0:.0f}s; kept step {best_step}: held-out loss {vl:.3f} (perplexity {math.exp(vl):.1f})")
    return {"steps": step, "kept_step": best_step, "tokens": tokens, "seconds": round(time.time() - t0),
            "val_loss": round(vl, 4)}


# ---------------------------------------------------------------- artifacts

def save(model, tok, cfg, args, stats):
    from transformers import Gemma4ForCausalLM

    out = args.out
    os.makedirs(out, exist_ok=True)
    model = model.to("cpu").to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    st_bytes = os.path.getsize(os.path.join(out, "model.safetensors"))
    if st_bytes > args.max_mb * 1e6:
        sys.exit(f"model.safetensors is {st_bytes / 1e6:.2f} MB, over --max-mb {args.max_mb}")
    tok.save(os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>",
                   "model_max_length": cfg.max_position_embeddings, "tokenizer_class": "GemmaTokenizer"}, f, indent=2)
        f.write("\n")
    with open(os.path.join(out, "chat_template.jinja"), "w") as f:
        f.write(CHAT_TEMPLATE)
    # Greedy by default (no do_sample); <turn|> ends a chat answer as <eos> ends a document.
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": BOS, "eos_token_id": [EOS, TURN_CLOSE], "pad_token_id": PAD, "do_sample": False}, f, indent=2)
        f.write("\n")

    import transformers
    with open(os.path.join(out, "training.json"), "w") as f:
        json.dump({"command": "python3 scripts/train_default_model.py " + " ".join(sys.argv[1:]), "python": sys.version.split()[0],
                   "transformers": transformers.__version__, "torch": torch.__version__, "device": args.device,
                   "size": args.size, "seed": args.seed, "context": args.context, "batch": args.batch, "lr": args.lr,
                   "vocab_size": cfg.vocab_size, "parameters": sum(p.numel() for p in model.parameters()), **stats,
                   "continues": args.previous}, f, indent=2)
        f.write("\n")
    record_expected(out, tok, args)


def record_expected(out, tok, args):
    """expected.json: HF's greedy continuation of --prompt by the saved checkpoint."""
    import transformers
    from transformers import Gemma4ForCausalLM

    # The oracle: reload the bf16 checkpoint in f32 eager, as make_fixtures.py does.
    ref = Gemma4ForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager").eval()
    prompt = tok.encode(args.prompt, add_special_tokens=True).ids
    ids = torch.tensor([prompt])
    with torch.no_grad():
        gen = ref.generate(ids, max_new_tokens=args.new_tokens, do_sample=False, output_logits=True,
                           return_dict_in_generate=True, eos_token_id=None, pad_token_id=PAD)
    tokens = gen.sequences[0, len(prompt):].tolist()
    # Seven significant digits: f32 precision is what the comparison needs,
    # and the file stays small enough to commit.
    logits = [[float(f"{x:.7g}") for x in l[0].float().tolist()] for l in gen.logits]
    margins = [float(v[0] - v[1]) for v in (torch.topk(l[0].float(), 2).values for l in gen.logits)]
    # The text a run that stops at the first stop id prints.
    stop = next((i for i, t in enumerate(tokens) if t in (EOS, TURN_CLOSE)), len(tokens))
    text = tok.decode(tokens[:stop], skip_special_tokens=True)
    # HF's own bf16 run, teacher-forced on the f32 tokens: how far bf16
    # arithmetic alone moves the logits (the whole-model rule's second arm).
    bf = Gemma4ForCausalLM.from_pretrained(out, dtype=torch.bfloat16, attn_implementation="eager").eval()
    with torch.no_grad():
        lb = bf(input_ids=torch.tensor([prompt + tokens[:-1]])).logits[0, len(prompt) - 1:].double()
    lf = torch.stack([l[0].double() for l in gen.logits])
    bf_cos = torch.nn.functional.cosine_similarity(lb, lf, dim=-1).tolist()
    bf_max = (lb - lf).abs().max(dim=-1).values.tolist()
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump({"transformers": transformers.__version__, "torch": torch.__version__, "prompt_text": args.prompt,
                   "prompt": prompt, "tokens": tokens, "text": text, "top2_margin": margins,
                   "hf_bf16_cosine": bf_cos, "hf_bf16_max_abs": bf_max, "logits": logits}, f)
    log(f"prompt {args.prompt!r} -> {prompt}\ncontinuation ({len(tokens)} tokens, min top-2 margin {min(margins):.3f}; "
        f"first stop id at step {stop}): {text!r}\nHF bf16 vs f32 (teacher-forced): min cosine {min(bf_cos):.5f}, "
        f"max abs {max(bf_max):.4f}")
    for name in sorted(os.listdir(out)):
        log(f"  {name}: {os.path.getsize(os.path.join(out, name)):,} bytes")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--minutes", type=float, default=35.0, help="training time box")
    ap.add_argument("--size", choices=sorted(SIZES), help="model size (default: tiny on cpu, small on cuda)")
    ap.add_argument("--vocab", type=int, default=2048, help="vocabulary size, specials and byte tokens included")
    ap.add_argument("--context", type=int, help="training window = max_position_embeddings (default: 128 on cpu, 256 on cuda)")
    ap.add_argument("--batch", type=int, help="sequences per step (default: 16 on cpu, 64 on cuda)")
    ap.add_argument("--eval-every", type=float, help="seconds between held-out evaluations (default: 180 on cpu, 15 on cuda)")
    ap.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch CPU threads (on a shared two-core machine one thread measured faster than two: 750 vs 200 tok/s)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--init", help="continue training the model (and tokenizer) saved in this directory")
    ap.add_argument("--prompt", default=DEFAULT_PROMPT, help="prompt of expected.json")
    ap.add_argument("--new-tokens", type=int, default=32, help="greedy tokens recorded in expected.json")
    ap.add_argument("--max-mb", type=float, default=8.0, help="refuse a model.safetensors larger than this")
    ap.add_argument("--log-every", type=float, default=30.0, help="seconds between progress lines")
    ap.add_argument("--record-only", action="store_true",
                    help="train nothing: rewrite --out's expected.json from the checkpoint there (--prompt, --new-tokens)")
    args = ap.parse_args()
    args.previous = None
    gpu = args.device == "cuda"
    args.size = args.size or ("small" if gpu else "tiny")
    args.batch = args.batch or (64 if gpu else 16)
    args.context = args.context or (256 if gpu else 128)
    args.eval_every = args.eval_every or (15.0 if gpu else 180.0)

    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: torch sees no CUDA device")
    device = torch.device(args.device)

    from transformers import Gemma4ForCausalLM

    if args.record_only:
        from tokenizers import Tokenizer
        record_expected(args.out, Tokenizer.from_file(os.path.join(args.out, "tokenizer.json")), args)
        return
    docs = corpus(args.seed)
    # sdpa measured faster than eager for training on the CPU (770 vs 620 tok/s).
    if args.init:
        # Continue an earlier run (a time box split in two): its tokenizer
        # and weights, a fresh optimizer and schedule, --seed's data order.
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(os.path.join(args.init, "tokenizer.json"))
        model = Gemma4ForCausalLM.from_pretrained(args.init, dtype=torch.float32, attn_implementation="sdpa").to(device)
        cfg = model.config
        args.context = cfg.max_position_embeddings
        with open(os.path.join(args.init, "training.json")) as f:
            args.previous = json.load(f)
    else:
        tok = train_tokenizer(docs, args.vocab)
        cfg = make_config(args.size, tok.get_vocab_size(), args.context)
        cfg._attn_implementation = "sdpa"
        model = Gemma4ForCausalLM(cfg).to(device)
    data = encode_corpus(tok, docs, random.Random(args.seed))
    log(f"tokenizer: {tok.get_vocab_size()} tokens; corpus {len(data) / 1e6:.2f} M tokens")
    n = sum(p.numel() for p in model.parameters())
    log(f"model: {args.size}, {n / 1e6:.2f} M parameters ({2 * n / 1e6:.1f} MB in bf16) on {device}")
    stats = train(model, data, args, device)
    save(model, tok, cfg, args, stats)


if __name__ == "__main__":
    main()
