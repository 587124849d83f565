"""LLM.chat and LLM.get_tokenizer(): chat templates (given per call: pycoder-tiny has none), tools, template
kwargs, continuing a final message, batches of conversations; encode/decode/apply_chat_template."""

from __future__ import annotations

import pytest

import peregrine
from peregrine import SamplingParams

from conftest import CHAT_TEMPLATE

TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
            "{% if flavour is defined %}# {{ flavour }}\n{% endif %}")
CONVERSATION = [{"role": "user", "content": "Write a function that adds two numbers."}]


def test_chat_renders_tokenizes_and_generates(llm):
    out = llm.chat(CONVERSATION, SamplingParams(temperature=0, max_tokens=12), chat_template=TEMPLATE,
                   use_tqdm=False)
    assert len(out) == 1
    expected_prompt = "<s><|user|>\nWrite a function that adds two numbers.\n<|assistant|>\n"
    assert out[0].prompt == expected_prompt
    tokenizer = llm.get_tokenizer()
    # The template writes <s>; chat tokenizes without adding another (as vLLM does).
    assert out[0].prompt_token_ids == tokenizer.encode(expected_prompt, add_special_tokens=False)
    assert out[0].prompt_token_ids.count(1) == 1
    same = llm.generate({"prompt_token_ids": out[0].prompt_token_ids}, SamplingParams(temperature=0, max_tokens=12),
                        use_tqdm=False)
    assert out[0].outputs[0].text == same[0].outputs[0].text


def test_chat_batches_and_options(llm):
    second = CONVERSATION + [{"role": "assistant", "content": "def add(a, b):"}]
    params = SamplingParams(temperature=0, max_tokens=8)
    outs = llm.chat([CONVERSATION, second], [params, params], chat_template=TEMPLATE, use_tqdm=False)
    assert len(outs) == 2 and outs[1].prompt.endswith("def add(a, b):\n<|assistant|>\n")
    cont = llm.chat(second, params, chat_template=TEMPLATE, add_generation_prompt=False, continue_final_message=True,
                    use_tqdm=False)[0]
    assert cont.prompt.endswith("<|assistant|>\ndef add(a, b):")
    kw = llm.chat(CONVERSATION, params, chat_template=TEMPLATE, chat_template_kwargs={"flavour": "typed"},
                  use_tqdm=False)[0]
    assert kw.prompt.endswith("<|assistant|>\n# typed\n")
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    with_tools = llm.chat(CONVERSATION, params, chat_template=str(CHAT_TEMPLATE), tools=tools, use_tqdm=False)[0]
    assert with_tools.prompt.startswith('<|tools|>\n[{"type": "function"')
    with pytest.raises(ValueError, match="continue_final_message and add_generation_prompt cannot both be true"):
        llm.chat(second, params, chat_template=TEMPLATE, continue_final_message=True, use_tqdm=False)


def test_chat_errors(llm):
    with pytest.raises(ValueError, match="no chat template.*chat_template="):
        llm.chat(CONVERSATION, use_tqdm=False)
    with pytest.raises(ValueError, match=r"messages\[0\].role"):
        llm.chat([{"content": "hi"}], chat_template=TEMPLATE, use_tqdm=False)
    with pytest.raises(ValueError, match="image_url"):
        llm.chat([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
                 chat_template=TEMPLATE, use_tqdm=False)
    with pytest.raises(ValueError, match="line 1"):
        llm.chat(CONVERSATION, chat_template="{% for m in messages %}", use_tqdm=False)
    with pytest.raises(TypeError, match=r"messages\[0\].content\[0\]: bytes is not a JSON value"):
        llm.chat([{"role": "user", "content": [b"x"]}], chat_template=TEMPLATE, chat_template_content_format="openai",
                 use_tqdm=False)


def test_tokenizer(llm):
    tok = llm.get_tokenizer()
    assert tok is llm.get_tokenizer()
    ids = tok.encode("def f(x):")
    assert ids[0] == 1 and tok.decode(ids, skip_special_tokens=True) == "def f(x):"
    assert tok.decode(ids).startswith("<s>")
    assert tok.encode("def f(x):", add_special_tokens=False) == ids[1:]
    assert tok("a b")["input_ids"] == tok.encode("a b")
    assert tok.batch_decode([ids, ids[1:]], skip_special_tokens=True) == ["def f(x):"] * 2
    assert tok.eos_token_id == 2 and tok.vocab_size == len(tok) == 32000
    assert tok.convert_ids_to_tokens(2) == "</s>"
    text = tok.apply_chat_template(CONVERSATION, chat_template=TEMPLATE, add_generation_prompt=True, tokenize=False)
    assert text == "<s><|user|>\nWrite a function that adds two numbers.\n<|assistant|>\n"
    assert tok.apply_chat_template(CONVERSATION, chat_template=TEMPLATE, add_generation_prompt=True) == \
        tok.encode(text, add_special_tokens=False)
    assert tok.apply_chat_template(CONVERSATION, chat_template=TEMPLATE, tokenize=False, flavour="x").endswith("# x\n")
    with pytest.raises(ValueError, match="out of the vocabulary"):
        tok.decode([32000])
    with pytest.raises(TypeError):
        tok.encode(123)
