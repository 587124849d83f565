# Offline batch generation: a list of prompts, one SamplingParams, one LLM.
# Written against vLLM's offline API; with `peregrine` it runs on Peregrine's engine (models/pycoder-tiny).
import os

from peregrine import LLM, SamplingParams

MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models", "pycoder-tiny")

prompts = [
    "def fibonacci(n):\n",
    "class LinkedList:\n",
    "import json\n\ndef load_config(path):\n",
    "# Compute the mean of a list of numbers\n",
]
# Nucleus sampling at a moderate temperature; 48 new tokens per prompt.
sampling_params = SamplingParams(temperature=0.8, top_p=0.95, max_tokens=48)


def main():
    llm = LLM(model=MODEL)
    # One RequestOutput per prompt, in the order of the prompts.
    outputs = llm.generate(prompts, sampling_params)
    print("\nGenerated outputs:\n" + "-" * 60)
    for output in outputs:
        print(f"Prompt:    {output.prompt!r}")
        print(f"Generated: {output.outputs[0].text!r}")
        print("-" * 60)


if __name__ == "__main__":
    main()
