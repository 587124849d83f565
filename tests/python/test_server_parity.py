"""LLM.generate and LLM.chat give what the server (`peregrine serve`) and `peregrine generate --json` give for the
same request: one engine, one generation path."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import BIN, CHAT_TEMPLATE, MODEL

PROMPTS = ["def fibonacci(n):\n", "class Stack:\n    def __init__(self):\n        ", "import os\nimport sys\n",
           "for i in range(10):\n    print("]


def test_completions_equal_the_server(llm, server):
    from peregrine import SamplingParams

    outs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=24, logprobs=3), use_tqdm=False)
    body = server.post("/v1/completions", {"prompt": PROMPTS, "max_tokens": 24, "temperature": 0, "logprobs": 3})
    choices = sorted(body["choices"], key=lambda c: c["index"])
    assert len(choices) == len(outs)
    for out, choice in zip(outs, choices):
        completion = out.outputs[0]
        assert completion.text == choice["text"]
        assert completion.finish_reason == choice["finish_reason"]
        lp = choice["logprobs"]
        assert [next(iter(d.values())).logprob for d in completion.logprobs] == pytest.approx(lp["token_logprobs"],
                                                                                           abs=1e-6)
        assert "".join(lp["tokens"]) == completion.text
    assert body["usage"]["completion_tokens"] == sum(len(o.outputs[0].token_ids) for o in outs)
    assert body["usage"]["prompt_tokens"] == sum(len(o.prompt_token_ids) for o in outs)


def test_token_prompts_and_seeded_sampling_equal_the_server(llm, server):
    from peregrine import SamplingParams

    ids = llm.get_tokenizer().encode(PROMPTS[1])
    params = SamplingParams(temperature=0.9, top_p=0.95, top_k=50, seed=1234, max_tokens=20, n=2, stop=["\n\n"])
    out = llm.generate({"prompt_token_ids": ids}, params, use_tqdm=False)[0]
    body = server.post("/v1/completions", {"prompt": ids, "max_tokens": 20, "temperature": 0.9, "top_p": 0.95,
                                           "top_k": 50, "seed": 1234, "n": 2, "stop": ["\n\n"]})
    choices = sorted(body["choices"], key=lambda c: c["index"])
    assert [c.text for c in out.outputs] == [c["text"] for c in choices]
    assert [c.finish_reason for c in out.outputs] == [c["finish_reason"] for c in choices]
    assert [c.stop_reason for c in out.outputs] == [c.get("stop_reason") for c in choices]


def test_chat_equals_the_server(llm, server):
    from peregrine import SamplingParams

    template = CHAT_TEMPLATE.read_text()
    messages = [{"role": "system", "content": "You write Python."},
                {"role": "user", "content": [{"type": "text", "text": "Sort a list"}, {"type": "text", "text": "fast"}]}]
    tools = [{"type": "function", "function": {"name": "run", "parameters": {"type": "object"}}}]
    out = llm.chat(messages, SamplingParams(temperature=0, max_tokens=16), chat_template=template, tools=tools,
                   use_tqdm=False)[0]
    # tool_choice "none": tools reach the template; "auto" would need a --tool-call-parser (a 400, as in vLLM).
    body = server.post("/v1/chat/completions", {"messages": messages, "max_tokens": 16, "temperature": 0,
                                                "tools": tools, "tool_choice": "none"})
    assert out.outputs[0].text == body["choices"][0]["message"]["content"]
    assert len(out.prompt_token_ids) == body["usage"]["prompt_tokens"]
    assert out.prompt.startswith("<|tools|>")


def test_generate_equals_the_cli(llm):
    from peregrine import SamplingParams

    if not BIN.exists():
        pytest.skip(f"no peregrine binary at {BIN}")
    ids = [llm.get_tokenizer().encode(p) for p in PROMPTS[:2]]
    cli = subprocess.run([str(BIN), "generate", "--model", str(MODEL), "--device", "cpu", "--json", "--max-tokens", "20",
                          "--logprobs", "2"] + [a for i in ids for a in ("--prompt-ids", ",".join(map(str, i)))],
                         check=True, capture_output=True, text=True).stdout
    rows = [json.loads(line) for line in cli.splitlines() if line.strip()]
    outs = llm.generate([{"prompt_token_ids": i} for i in ids], SamplingParams(temperature=0, max_tokens=20, logprobs=2),
                        use_tqdm=False)
    for row, out in zip(rows, outs):
        assert row["prompt_token_ids"] == out.prompt_token_ids
        assert row["token_ids"] == out.outputs[0].token_ids
        assert row["text"] == out.outputs[0].text
        assert [p["logprob"] for p in row["logprobs"]] == pytest.approx(
            [d[t].logprob for d, t in zip(out.outputs[0].logprobs, out.outputs[0].token_ids)], abs=1e-6)
