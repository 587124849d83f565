"""LLM.generate: prompt forms, one or many SamplingParams, seeded sampling, stops, logprobs and the output classes."""

from __future__ import annotations

import pytest

from peregrine import CompletionOutput, Logprob, RequestOutput, SamplingParams

PROMPT = "def quicksort(items):\n"


def greedy(**kw):
    return SamplingParams(temperature=0, **kw)


def test_prompt_forms_give_the_same_output(llm):
    ids = llm.get_tokenizer().encode(PROMPT)
    params = greedy(max_tokens=12)
    a = llm.generate(PROMPT, params, use_tqdm=False)
    b = llm.generate([PROMPT], params, use_tqdm=False)
    c = llm.generate({"prompt": PROMPT}, params, use_tqdm=False)
    d = llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)
    assert len(a) == len(b) == len(c) == len(d) == 1
    texts = {x[0].outputs[0].text for x in (a, b, c, d)}
    assert len(texts) == 1 and texts.pop()
    assert a[0].prompt == PROMPT and d[0].prompt is None
    assert a[0].prompt_token_ids == ids == d[0].prompt_token_ids


def test_output_classes_have_vllms_fields(llm):
    out = llm.generate([PROMPT, "x = "], greedy(max_tokens=5), use_tqdm=False)
    assert [type(o) for o in out] == [RequestOutput, RequestOutput]
    first = out[0]
    assert isinstance(first.request_id, str) and first.request_id != out[1].request_id
    assert first.finished is True and first.prompt_logprobs is None
    assert first.num_cached_tokens is not None and first.metrics.arrival_time <= first.metrics.finished_time
    c = first.outputs[0]
    assert isinstance(c, CompletionOutput) and c.index == 0
    assert isinstance(c.text, str) and len(c.token_ids) == 5 and all(isinstance(t, int) for t in c.token_ids)
    assert c.cumulative_logprob is None and c.logprobs is None  # not asked for
    assert c.finish_reason == "length" and c.stop_reason is None and c.finished()


def test_default_sampling_params_follow_vllm(llm):
    # generation_config="vllm" in the fixture: vLLM's own defaults (temperature 1, 16 tokens).
    d = llm.get_default_sampling_params()
    assert d.temperature == 1.0 and d.max_tokens == 16 and d.top_p == 1.0
    out = llm.generate(PROMPT, use_tqdm=False)[0]
    assert len(out.outputs[0].token_ids) <= 16


def test_seeded_sampling_is_reproducible(llm):
    params = SamplingParams(temperature=1.0, top_p=0.9, seed=7, max_tokens=24, ignore_eos=True)
    a = llm.generate([PROMPT] * 3, params, use_tqdm=False)
    b = llm.generate(PROMPT, params, use_tqdm=False)
    texts = [o.outputs[0].token_ids for o in a] + [b[0].outputs[0].token_ids]
    assert all(t == texts[0] for t in texts)  # a request's draws depend only on its seed
    other = llm.generate(PROMPT, SamplingParams(temperature=1.0, top_p=0.9, seed=8, max_tokens=24, ignore_eos=True),
                         use_tqdm=False)
    assert other[0].outputs[0].token_ids != texts[0]


def test_n_completions_share_a_prompt(llm):
    out = llm.generate(PROMPT, SamplingParams(n=4, temperature=1.0, seed=3, max_tokens=16, ignore_eos=True),
                       use_tqdm=False)[0]
    assert [c.index for c in out.outputs] == [0, 1, 2, 3]
    assert len({tuple(c.token_ids) for c in out.outputs}) > 1
    again = llm.generate(PROMPT, SamplingParams(n=4, temperature=1.0, seed=3, max_tokens=16, ignore_eos=True),
                         use_tqdm=False)[0]
    assert [c.token_ids for c in again.outputs] == [c.token_ids for c in out.outputs]


def test_mixed_sampling_params_in_one_batch_equal_each_alone(llm):
    prompts = [PROMPT, "import numpy as np\n", "class Node:\n", "# read a file\n", "x = [1, 2, 3]\n"]
    params = [greedy(max_tokens=10), SamplingParams(temperature=0.8, seed=11, max_tokens=14, ignore_eos=True),
              greedy(max_tokens=6, logprobs=2), SamplingParams(n=2, temperature=0.7, top_k=20, seed=5, max_tokens=8),
              greedy(max_tokens=9, stop=["]"], repetition_penalty=1.3)]
    batch = llm.generate(prompts, params, use_tqdm=False)
    for prompt, sp, out in zip(prompts, params, batch):
        alone = llm.generate(prompt, sp, use_tqdm=False)[0]
        assert [c.token_ids for c in out.outputs] == [c.token_ids for c in alone.outputs], prompt
        assert [c.text for c in out.outputs] == [c.text for c in alone.outputs], prompt
        assert len(out.outputs) == sp.n
        assert len(out.outputs[0].token_ids) <= sp.max_tokens
    assert batch[2].outputs[0].logprobs is not None and batch[0].outputs[0].logprobs is None


def test_stop_strings_and_stop_tokens_set_stop_reason(llm):
    base = llm.generate(PROMPT, greedy(max_tokens=30, ignore_eos=True), use_tqdm=False)[0].outputs[0]
    # Stop at the first newline the model writes.
    assert "\n" in base.text
    cut = llm.generate(PROMPT, greedy(max_tokens=30, stop=["\n"]), use_tqdm=False)[0].outputs[0]
    assert cut.finish_reason == "stop" and cut.stop_reason == "\n"
    assert cut.text == base.text[: base.text.index("\n")]
    kept = llm.generate(PROMPT, greedy(max_tokens=30, stop="\n", include_stop_str_in_output=True),
                        use_tqdm=False)[0].outputs[0]
    assert kept.text == cut.text + "\n"
    token = base.token_ids[3]
    by_id = llm.generate(PROMPT, greedy(max_tokens=30, stop_token_ids=[token]), use_tqdm=False)[0].outputs[0]
    assert by_id.finish_reason == "stop" and by_id.stop_reason == token
    assert by_id.token_ids == base.token_ids[: base.token_ids.index(token) + 1]
    late = llm.generate(PROMPT, greedy(max_tokens=30, stop_token_ids=[token], min_tokens=10), use_tqdm=False)[0]
    assert len(late.outputs[0].token_ids) >= 10


def test_logprobs_are_dicts_of_logprob(llm):
    out = llm.generate(PROMPT, greedy(max_tokens=6, logprobs=3, prompt_logprobs=2), use_tqdm=False)[0]
    c = out.outputs[0]
    assert len(c.logprobs) == len(c.token_ids)
    total = 0.0
    for token, position in zip(c.token_ids, c.logprobs):
        assert next(iter(position)) == token  # the sampled token first
        assert 3 <= len(position) <= 4
        assert all(isinstance(k, int) and isinstance(v, Logprob) for k, v in position.items())
        assert position[token].rank == 1  # greedy
        assert sorted(v.rank for v in position.values()) == [1, 2, 3]
        assert all(isinstance(v.decoded_token, str) for v in position.values())
        total += position[token].logprob
    assert c.cumulative_logprob == pytest.approx(total, abs=1e-4)
    assert out.prompt_logprobs[0] is None
    assert len(out.prompt_logprobs) == len(out.prompt_token_ids)
    for token, position in zip(out.prompt_token_ids[1:], out.prompt_logprobs[1:]):
        assert next(iter(position)) == token and 2 <= len(position) <= 3
        assert position[token].rank >= 1


def test_logprobs_zero_gives_only_the_sampled_token(llm):
    c = llm.generate(PROMPT, SamplingParams(temperature=0.5, seed=1, max_tokens=4, logprobs=0),
                     use_tqdm=False)[0].outputs[0]
    assert [list(p) for p in c.logprobs] == [[t] for t in c.token_ids]


def test_detokenize_false_and_truncate_prompt_tokens(llm):
    base = llm.generate(PROMPT, greedy(max_tokens=5), use_tqdm=False)[0]
    silent = llm.generate(PROMPT, greedy(max_tokens=5, detokenize=False, logprobs=1), use_tqdm=False)[0]
    assert silent.outputs[0].text == "" and silent.outputs[0].token_ids == base.outputs[0].token_ids
    assert all(v.decoded_token is None for p in silent.outputs[0].logprobs for v in p.values())
    cut = llm.generate(PROMPT, greedy(max_tokens=5, truncate_prompt_tokens=3), use_tqdm=False)[0]
    assert cut.prompt_token_ids == base.prompt_token_ids[-3:]


def test_many_prompts_and_the_progress_callback(llm):
    """More prompts than max_num_seqs run to the end; a tqdm-like class given as use_tqdm sees every prompt."""
    updates = []

    class Bar:
        def __init__(self, total, desc):
            self.total, self.desc, self.n = total, desc, 0

        def update(self, k):
            self.n += k
            updates.append(self.n)

        def close(self):
            updates.append("closed")

    prompts = [f"value_{i} = " for i in range(100)]
    outs = llm.generate(prompts, greedy(max_tokens=3), use_tqdm=Bar)
    assert len(outs) == 100 and all(len(o.outputs[0].token_ids) == 3 for o in outs)
    assert [o.prompt for o in outs] == prompts
    assert updates[-1] == "closed" and updates[-2] == 100


def test_skip_special_tokens(llm):
    eos = llm.get_tokenizer().eos_token_id
    params = SamplingParams(temperature=0, max_tokens=3, logit_bias={eos: 100.0}, ignore_eos=True,
                            skip_special_tokens=False)
    c = llm.generate(PROMPT, params, use_tqdm=False)[0].outputs[0]
    assert c.token_ids == [eos] * 3 and c.text == " </s> </s> </s>"  # spaces_between_special_tokens=True
    params.spaces_between_special_tokens = False
    assert llm.generate(PROMPT, params, use_tqdm=False)[0].outputs[0].text == "</s></s></s>"
    hidden = llm.generate(PROMPT, SamplingParams(temperature=0, max_tokens=3, logit_bias={eos: 100.0},
                                                 ignore_eos=True), use_tqdm=False)[0].outputs[0]
    assert hidden.text == ""


def test_our_progress_bar():
    import io

    from peregrine._progress import _Bar

    out = io.StringIO()
    bar = _Bar(4, "Processed prompts", stream=out, min_interval=0)
    for _ in range(4):
        bar.update(1)
    bar.close()
    lines = out.getvalue().split("\r")
    assert lines[-1].startswith("Processed prompts: 100%|####################| 4/4 [")
    assert out.getvalue().endswith("it/s]\n")


def test_speculative_decoding_gives_the_plain_greedy_output(llm, model_path):
    """speculative_config (vLLM's dict) drafts and verifies; greedy output is token for token the plain one."""
    from peregrine import LLM

    prompts = ["def fibonacci(n):\n    ", "import os\nimport sys\n\ndef main():\n    for path in sys.argv[1:]:\n"]
    params = SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=True)
    plain = [o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)]
    for config in [{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3},
                   {"method": "lookahead", "num_speculative_tokens": 5}]:
        with LLM(model_path, device="cpu", max_model_len=512, num_gpu_blocks_override=256,
                 speculative_config=config) as spec:
            got = [o.outputs[0].token_ids for o in spec.generate(prompts, params, use_tqdm=False)]
        assert got == plain, config["method"]
