"""PyTorch + transformers baseline on the GPU, in the same device run as Peregrine's benchmarks: a Llama model
with random bf16 weights built from a config.json; bs=1 decode (static cache, eager), 8K prefill, and decode at
larger batches. Prints one 'torch ...' line per figure."""
import json
import sys
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.cache_utils import StaticCache


def timed(fn, reps=3):
    fn()
    torch.cuda.synchronize()
    best = 1e30
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    cfg = json.load(open(sys.argv[1]))
    config = LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("architectures", "torch_dtype")})
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    t0 = time.perf_counter()
    with torch.device("cuda"):
        torch.set_default_dtype(torch.bfloat16)
        model = LlamaForCausalLM(config).eval()
    torch.cuda.synchronize()
    print(f"torch load_s {time.perf_counter() - t0:.1f}")
    params = sum(p.numel() for p in model.parameters())
    with torch.no_grad():
        # 8K prefill (no cache), logits of the last position only.
        ids = torch.randint(0, config.vocab_size, (1, 8192), device="cuda")
        t = timed(lambda: model(ids, logits_to_keep=1, use_cache=False), reps=2)
        print(f"torch prefill_8192_tokens_per_s {8192 / t:.0f} seconds {t:.3f}")
        for bs in (1, 8, 64):
            cache = StaticCache(config=config, max_batch_size=bs, max_cache_len=1024 + 128, device="cuda", dtype=torch.bfloat16)
            prompt = torch.randint(0, config.vocab_size, (bs, 1024), device="cuda")
            pos = torch.arange(1024, device="cuda")
            model(prompt, past_key_values=cache, cache_position=pos, logits_to_keep=1)
            tok = torch.randint(0, config.vocab_size, (bs, 1), device="cuda")
            steps = 32
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for i in range(steps):
                cp = torch.tensor([1024 + i], device="cuda")
                model(tok, past_key_values=cache, cache_position=cp, logits_to_keep=1)
            torch.cuda.synchronize()
            dt = (time.perf_counter() - t0) / steps
            print(f"torch decode_bs{bs}_tokens_per_s {bs / dt:.1f} ms_per_step {dt * 1e3:.2f} (eager, static cache)")
            if bs == 1 and "--compile" in sys.argv:
                # torch.compile (CUDA graphs via reduce-overhead) on the same static cache; a failure is reported,
                # not fatal, so the eager figures above still stand.
                try:
                    step = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
                    for i in range(3):  # compile and warm up
                        cp = torch.tensor([1024 + steps + i], device="cuda")
                        step(input_ids=tok, past_key_values=cache, cache_position=cp, logits_to_keep=1)
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    for i in range(steps):
                        cp = torch.tensor([1024 + steps + 3 + i], device="cuda")
                        step(input_ids=tok, past_key_values=cache, cache_position=cp, logits_to_keep=1)
                    torch.cuda.synchronize()
                    dt = (time.perf_counter() - t0) / steps
                    print(f"torch decode_bs1_compiled_tokens_per_s {1 / dt:.1f} ms_per_step {dt * 1e3:.2f}")
                except Exception as e:  # noqa: BLE001
                    print(f"torch decode_bs1_compiled failed: {type(e).__name__}: {str(e)[:200]}")
            del cache
    print(f"torch params {params / 1e9:.2f}B")


if __name__ == "__main__":
    main()
