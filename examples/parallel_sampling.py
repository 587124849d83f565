# Parallel sampling: n completions of one prompt. They share the prompt's KV cache and each draws its own
# tokens; with a seed the whole set is reproducible.
import os

from peregrine import LLM, SamplingParams

MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models", "pycoder-tiny")


def main():
    llm = LLM(model=MODEL)
    sampling_params = SamplingParams(n=4, temperature=1.0, top_k=50, seed=42, max_tokens=32)
    outputs = llm.generate("def merge_sorted(a, b):\n", sampling_params)

    for output in outputs:
        print(f"Prompt: {output.prompt!r}")
        for completion in output.outputs:
            print(f"[{completion.index}] ({completion.finish_reason}) {completion.text!r}")


if __name__ == "__main__":
    main()
