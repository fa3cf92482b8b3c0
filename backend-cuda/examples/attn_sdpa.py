"""PyTorch scaled_dot_product_attention on the shapes attn_bench times, for the
prefill ratio (run on the same GPU in the same session):
    python3 backend-cuda/examples/attn_sdpa.py
FLOPs count only unmasked products (4 * keys_seen * hd * nh), as attn_bench.
Two columns: SDPA's own dispatch (enable_gqa; a boolean mask for the window),
and the flash backend alone (K/V heads repeated beforehand, outside the
timing; causal only, hd <= 256: the shapes it takes)."""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

torch.manual_seed(0)
L, nh = 4096, 32


def median_ms(fn):
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
    return sorted(ts)[len(ts) // 2]


print("| SDPA | L | window | ms | TFLOP/s | flash backend ms | TFLOP/s |\n|---|---|---|---|---|---|---|")
for nkv, hd, window in [(16, 256, 0), (16, 256, 1024), (4, 512, 0), (4, 512, 1024)]:
    scale = hd**-0.5
    q = torch.randn(1, nh, L, hd, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, nkv, L, hd, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, nkv, L, hd, device="cuda", dtype=torch.bfloat16)
    if window:
        i = torch.arange(L, device="cuda")
        mask = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - window)
        fn = lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)
    else:
        fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=True)
    ms = median_ms(fn)
    keys = sum(min(i + 1, window) if window else i + 1 for i in range(L))
    flops = 4 * keys * hd * nh
    flash = "| n/a | n/a"
    if not window and hd <= 256:
        kr, vr = k.repeat_interleave(nh // nkv, dim=1), v.repeat_interleave(nh // nkv, dim=1)
        try:
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                fms = median_ms(lambda: F.scaled_dot_product_attention(q, kr, vr, is_causal=True, scale=scale))
            flash = f"| {fms:.3f} | {flops / fms / 1e9:.1f}"
        except RuntimeError as e:
            flash = f"| failed: {str(e).splitlines()[0][:60]} |"
    print(f"| SDPA nh={nh} nkv={nkv} hd={hd} | {L} | {window} | {ms:.3f} | {flops / ms / 1e9:.1f} {flash} |")
