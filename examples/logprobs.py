# Log-probabilities: the top candidates at each generated position and at each prompt position.
import os

from peregrine import LLM, SamplingParams

MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models", "pycoder-tiny")


def show(position_logprobs):
    # A dict of token id -> Logprob; the chosen token comes first.
    return ", ".join(f"{lp.decoded_token!r}:{lp.logprob:.3f} (rank {lp.rank})" for lp in position_logprobs.values())


def main():
    llm = LLM(model=MODEL)
    # Greedy decoding, the 3 most likely tokens at each step, and the 2 most likely at each prompt position.
    sampling_params = SamplingParams(temperature=0.0, max_tokens=8, logprobs=3, prompt_logprobs=2)
    outputs = llm.generate(["def is_even(n):\n    return"], sampling_params)

    for output in outputs:
        print(f"Prompt: {output.prompt!r}")
        # The first prompt token has nothing before it to predict it: its entry is None.
        for token_id, position in zip(output.prompt_token_ids, output.prompt_logprobs):
            print(f"  prompt token {token_id:6d}: {show(position) if position else None}")
        completion = output.outputs[0]
        print(f"Generated: {completion.text!r} (cumulative logprob {completion.cumulative_logprob:.3f})")
        for token_id, position in zip(completion.token_ids, completion.logprobs):
            print(f"  token {token_id:6d}: {show(position)}")


if __name__ == "__main__":
    main()
