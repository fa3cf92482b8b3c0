"""PyTorch scaled_dot_product_attention on the shapes attn_bench times, for the
prefill ratio (run on the same GPU in the same session):
    python3 backend-cuda/examples/attn_sdpa.py
FLOPs count only unmasked products (4 * keys_seen * hd * nh), as attn_bench."""
import torch
import torch.nn.functional as F

torch.manual_seed(0)
L, nh = 4096, 32
for nkv, hd, window in [(16, 256, 0), (16, 256, 1024), (4, 512, 0)]:
    q = torch.randn(1, nh, L, hd, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, nkv, L, hd, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, nkv, L, hd, device="cuda", dtype=torch.bfloat16)
    if window:
        i = torch.arange(L, device="cuda")
        mask = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - window)
        fn = lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0, enable_gqa=True)
    else:
        fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0, enable_gqa=True)
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(15):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e))
    ms = sorted(ts)[len(ts) // 2]
    keys = sum(min(i + 1, window) if window else i + 1 for i in range(L))
    print(f"| SDPA nh={nh} nkv={nkv} hd={hd} | {L} | {window} | {ms:.3f} | {4 * keys * hd * nh / ms / 1e9:.1f} |")
