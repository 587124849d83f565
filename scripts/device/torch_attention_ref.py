# PyTorch reference for the CUDA attention benchmarks: causal prefill at 8K (32 q / 8 kv heads, d128, bf16)
# through SDPA's cuDNN and flash backends, and decode attention (one query) at 8K/32K/128K, timed with events.
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def time_ms(fn, reps=10):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


dev = "cuda"
s, hq, hkv, d = 8192, 32, 8, 128
q = torch.randn(1, hq, s, d, device=dev, dtype=torch.bfloat16)
k = torch.randn(1, hkv, s, d, device=dev, dtype=torch.bfloat16)
v = torch.randn(1, hkv, s, d, device=dev, dtype=torch.bfloat16)
flops = 4 * hq * d * s * (s + 1) / 2
for name, backend in [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)]:
    try:
        with sdpa_kernel(backend):
            ms = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True))
        print(f"torch sdpa {name} prefill 8K causal: {ms:.2f} ms, {flops / ms / 1e9:.0f} TFLOP/s")
    except Exception as e:  # a backend may be unavailable for this shape
        print(f"torch sdpa {name}: unavailable ({type(e).__name__}: {str(e)[:80]})")
for ctx in (8192, 32768, 131072):
    for bs in (1, 8):
        kk = torch.randn(bs, hkv, ctx, d, device=dev, dtype=torch.bfloat16)
        vv = torch.randn(bs, hkv, ctx, d, device=dev, dtype=torch.bfloat16)
        qq = torch.randn(bs, hq, 1, d, device=dev, dtype=torch.bfloat16)
        ms = time_ms(lambda: F.scaled_dot_product_attention(qq, kk, vv, enable_gqa=True))
        gb = 2 * kk.numel() * 2 / 1e9
        print(f"torch sdpa decode ctx {ctx // 1024}K bs {bs}: {ms * 1e3:.0f} us, {gb / ms:.2f} TB/s KV (contiguous)")
        del kk, vv
