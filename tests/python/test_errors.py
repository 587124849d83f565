"""Errors: TypeError for wrong types and unknown arguments, ValueError (InvalidArgumentError, UnsupportedError) for
wrong values and unimplemented options, with the engine's (the server's) messages; PeregrineError for what the
engine refuses at run time."""

from __future__ import annotations

import pytest

import peregrine
from peregrine import LLM, SamplingParams

MODEL_KW = dict(device="cpu", max_model_len=128, num_gpu_blocks_override=64)


@pytest.mark.parametrize("kwargs, message", [
    ({"top_p": 1.5}, "top_p must be in (0, 1], got 1.5"),
    ({"temperature": -1}, "temperature must be >= 0, got -1"),
    ({"n": 0}, "n must be in [1, 128], got 0"),
    ({"top_k": -2}, "top_k must be -1 (disable) or at least 1, got -2"),
    ({"min_p": 2.0}, "min_p must be in [0, 1], got 2"),
    ({"presence_penalty": 3.0}, "presence_penalty must be in [-2, 2], got 3"),
    ({"repetition_penalty": 0.0}, "repetition_penalty must be > 0, got 0"),
    ({"max_tokens": 0}, "max_tokens must be at least 1, got 0"),
    ({"min_tokens": 5, "max_tokens": 2}, "min_tokens must be <= max_tokens, got min_tokens 5 and max_tokens 2"),
    ({"logprobs": 21}, "logprobs must be in [0, 20], got 21"),
    ({"prompt_logprobs": -1}, "prompt_logprobs must be in [0, 20], got -1"),
    ({"stop": [""]}, "stop: stop strings must not be empty"),
    ({"logit_bias": {5: 200.0}}, "logit_bias: bias for token 5 must be in [-100, 100], got 200"),
    ({"logit_bias": {-1: 1.0}}, "logit_bias: token id -1 is negative"),
    ({"stop_token_ids": [-3]}, "stop_token_ids: token id -3 is negative"),
])
def test_sampling_params_values_are_checked_by_the_engines_validator(kwargs, message):
    with pytest.raises(ValueError) as info:
        SamplingParams(**kwargs)
    assert str(info.value) == message
    assert isinstance(info.value, peregrine.InvalidArgumentError) and info.value.code == "invalid_argument"


@pytest.mark.parametrize("kwargs", [{"temperature": "hot"}, {"n": 1.5}, {"max_tokens": "16"}, {"stop": [1]},
                                    {"ignore_eos": 1}, {"logit_bias": [1, 2]}, {"seed": 1.0}])
def test_sampling_params_types_raise_type_error(kwargs):
    with pytest.raises(TypeError):
        SamplingParams(**kwargs)


def test_sampling_params_unknown_and_unimplemented_fields():
    with pytest.raises(TypeError):
        SamplingParams(not_a_field=1)
    with pytest.raises(TypeError, match="structured_outputs"):
        SamplingParams(structured_outputs={"json": {}})  # a StructuredOutputsParams is expected
    with pytest.raises(ValueError, match="logits_processors"):
        SamplingParams(logits_processors=[lambda ids, logits: logits])
    with pytest.raises(ValueError, match="allowed_token_ids"):
        SamplingParams(allowed_token_ids=[1, 2])


def test_model_dependent_checks_run_at_generate(llm):
    with pytest.raises(ValueError, match=r"logit_bias: token id 99999 is out of the vocabulary \[0, 32000\)"):
        llm.generate("x", SamplingParams(logit_bias={99999: 1.0}), use_tqdm=False)
    with pytest.raises(ValueError, match="stop_token_ids: token id 32000"):
        llm.generate("x", SamplingParams(stop_token_ids=[32000]), use_tqdm=False)
    with pytest.raises(ValueError, match="maximum context length is 512 tokens"):
        llm.generate({"prompt_token_ids": [5] * 600}, SamplingParams(max_tokens=4), use_tqdm=False)
    with pytest.raises(ValueError, match="prompt: token id 40000 at index 1"):
        llm.generate({"prompt_token_ids": [5, 40000]}, use_tqdm=False)
    # A batch with one bad prompt fails as a whole; the engine then serves the next call.
    with pytest.raises(ValueError, match="prompt: the prompt is empty"):
        llm.generate(["fine", {"prompt_token_ids": []}], SamplingParams(max_tokens=200, ignore_eos=True),
                     use_tqdm=False)
    assert llm.generate("x = ", SamplingParams(max_tokens=2), use_tqdm=False)[0].outputs[0].token_ids


def test_generate_arguments(llm):
    with pytest.raises(ValueError, match="The lengths of prompts and sampling_params must be the same."):
        llm.generate(["a", "b"], [SamplingParams(), SamplingParams(), SamplingParams()], use_tqdm=False)
    with pytest.raises(TypeError):
        llm.generate(["a", 3], use_tqdm=False)
    with pytest.raises(TypeError):
        llm.generate("a", {"temperature": 0}, use_tqdm=False)
    with pytest.raises(ValueError, match="unknown prompt field 'text'"):
        llm.generate({"text": "a"}, use_tqdm=False)
    with pytest.raises(peregrine.UnsupportedError, match="multi_modal_data"):
        llm.generate({"prompt": "a", "multi_modal_data": {"image": object()}}, use_tqdm=False)
    with pytest.raises(peregrine.UnsupportedError, match="lora_request"):
        llm.generate("a", lora_request=object(), use_tqdm=False)


def test_llm_options_are_vllms(model_path):
    with pytest.raises(TypeError, match="LLM\\(\\) got an unexpected keyword argument 'max_num_sequences'"):
        LLM(model_path, max_num_sequences=4)
    for option, value, what in [("cpu_offload_gb", 4, "CPU weight offloading")]:
        with pytest.raises(peregrine.UnsupportedError) as info:
            LLM(model_path, **{option: value}, **MODEL_KW)
        assert str(info.value).startswith(f"{option}=") and what in str(info.value)
        assert isinstance(info.value, ValueError)
    # kv_cache_dtype as vLLM spells it: fp8 / fp8_e4m3 / int8 are quantized caches, others are refused by name.
    with pytest.raises(ValueError, match="kv_cache_dtype must be auto, fp8, fp8_e4m3 or int8, not 'fp8_e5m2'"):
        LLM(model_path, kv_cache_dtype="fp8_e5m2", **MODEL_KW)
    # speculative_config is checked key by key, as --speculative-config is.
    with pytest.raises(ValueError, match="speculative_config.method"):
        LLM(model_path, speculative_config={"method": "medusa", "num_speculative_tokens": 3}, **MODEL_KW)
    with pytest.raises(ValueError, match="speculative_config.num_speculative_tokenz"):
        LLM(model_path, speculative_config={"method": "ngram", "num_speculative_tokenz": 3}, **MODEL_KW)
    with pytest.raises(TypeError, match="speculative_config must be a dict"):
        LLM(model_path, speculative_config="ngram", **MODEL_KW)
    with pytest.raises(ValueError, match="tensor_parallel_size 2 is not supported yet"):
        LLM(model_path, tensor_parallel_size=2)
    with pytest.raises(ValueError, match="block_size must be a power of two"):
        LLM(model_path, block_size=24)
    with pytest.raises(ValueError, match="dtype: unknown dtype 'int8'"):
        LLM(model_path, dtype="int8")
    with pytest.raises(TypeError, match="max_model_len must be int"):
        LLM(model_path, max_model_len="128")
    with pytest.raises(FileNotFoundError) as info:
        LLM("/nonexistent/model")
    assert isinstance(info.value, peregrine.PeregrineError) and info.value.code == "not_found"
    with pytest.raises(ValueError, match="exceeds the model's max_position_embeddings"):
        LLM(model_path, max_model_len=100000, device="cpu")
    # The "off" values of later options are accepted, as are knobs without effect here.
    with LLM(model_path, speculative_config=None, quantization=None, kv_cache_dtype="auto", trust_remote_code=True,
             disable_log_stats=True, seed=3, dtype="float", **MODEL_KW) as llm:
        assert llm.generate("x", SamplingParams(max_tokens=2), use_tqdm=False)[0].finished


def test_a_shut_down_engine_refuses_work(model_path):
    llm = LLM(model_path, **MODEL_KW)
    llm.shutdown()
    llm.shutdown()  # idempotent
    with pytest.raises(peregrine.PeregrineError) as info:
        llm.generate("x", use_tqdm=False)
    assert info.value.code == "unavailable" and "shutting down" in str(info.value)


def test_bad_token_ids_are_named(llm):
    with pytest.raises(TypeError, match=r"prompts\[1\].prompt_token_ids\[2\] must be an int \(a token id\), got 'x'"):
        llm.generate([{"prompt_token_ids": [1, 2]}, {"prompt_token_ids": [1, 2, "x"]}], use_tqdm=False)
    with pytest.raises(TypeError, match=r"prompts\[0\].prompt_token_ids\[0\] must be an int"):
        llm.generate({"prompt_token_ids": [2**40]}, use_tqdm=False)
    with pytest.raises(TypeError, match="prompt_token_ids must be a list of ints, got str"):
        llm.generate({"prompt_token_ids": "1 2 3"}, use_tqdm=False)
