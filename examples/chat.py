# Chat through the model's chat template: one conversation, then a batch of conversations.
# pycoder-tiny is a base model without a chat template, so this script passes one (as vLLM allows with
# chat_template=); with an instruction-tuned model, drop it and the model's own template is used.
import os

from peregrine import LLM, SamplingParams

MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models", "pycoder-tiny")

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "# {{ message['role'] }}: {{ message['content'] }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}# assistant:\n{% endif %}"
)


def print_outputs(outputs):
    for output in outputs:
        print(f"Prompt: {output.prompt!r}")
        print(f"Reply:  {output.outputs[0].text!r}")
        print("-" * 60)


def main():
    llm = LLM(model=MODEL)
    sampling_params = SamplingParams(temperature=0.5, max_tokens=40)

    conversation = [
        {"role": "system", "content": "You are a careful Python programmer."},
        {"role": "user", "content": "Write a function that reverses a string."},
    ]
    outputs = llm.chat(conversation, sampling_params, chat_template=CHAT_TEMPLATE, use_tqdm=False)
    print_outputs(outputs)

    # Several conversations in one call are generated as one batch.
    conversations = [
        conversation,
        [{"role": "user", "content": "How do I read a CSV file?"}],
        [{"role": "user", "content": "Sort a dictionary by its values."}],
    ]
    outputs = llm.chat(conversations, sampling_params, chat_template=CHAT_TEMPLATE, use_tqdm=False)
    print_outputs(outputs)


if __name__ == "__main__":
    main()
