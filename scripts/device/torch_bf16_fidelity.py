"""What a bf16 engine can be held to (issue 14's 2e-2 fidelity bound): transformers' own pycoder-tiny run in bfloat16
(and float16, and float32 as a check) against the float32 reference fixture, by the measure model_tests uses — the
largest |logprob difference| over the reference's top-5 tokens, at every prompt position (prefill_top5) and at each
output step up to the first near-tie (reference margin below twice the bound), the output fed back teacher-forced.
Usage: python3 torch_bf16_fidelity.py MODEL_DIR REFERENCE_JSON [BOUND]. Prints one line a dtype and device."""
import json
import sys

import torch
from transformers import AutoModelForCausalLM


def largest_error(model, cases, bound, device):
    worst, steps = 0.0, 0
    for c in cases:
        prompt, out = c["prompt_ids"], c["output_ids"]
        margins = c["top1_margin"]
        n_out = 0
        for s in range(len(out)):  # the output steps compared: up to the first near-tie, as the test
            if s < len(c["top5_logprobs"]) and c["top5_logprobs"][s] is not None:
                n_out = s + 1
            if margins[s] < 2 * bound:
                break
        ids = torch.tensor([prompt + out[:n_out]], device=device)
        with torch.no_grad():
            logits = model(ids).logits[0].float()
        lp = torch.log_softmax(logits, dim=-1)
        # Position p's logits predict token p + 1: prefill_top5[p] is the prediction after prompt[:p + 1].
        pre = c.get("prefill_top5") or []
        for p in range(len(pre) - 1):
            for tok, ref in pre[p]:
                worst = max(worst, abs(lp[p, tok].item() - ref))
        for s in range(n_out):
            row = len(prompt) - 1 + s
            for tok, ref in c["top5_logprobs"][s]:
                worst = max(worst, abs(lp[row, tok].item() - ref))
            steps += 1
    return worst, steps


def main():
    model_dir, ref_path = sys.argv[1], sys.argv[2]
    bound = float(sys.argv[3]) if len(sys.argv) > 3 else 2e-2
    cases = json.load(open(ref_path))["cases"]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device).eval()
        worst, steps = largest_error(model, cases, bound, device)
        print(f"transformers {str(dtype).replace('torch.', '')} on {device}: largest logprob error {worst:.2e} "
              f"over {steps} output steps and every prompt position (bound {bound:.0e})")


if __name__ == "__main__":
    main()
