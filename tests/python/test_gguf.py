"""LLM(model="file.gguf"): llama.cpp's GGUF files through the Python API, with the tokenizer they carry: text is
tokenized as llama.cpp tokenizes it (reference.json llamacpp_tokenize), greedy ids follow llama.cpp's up to its
near-ties, a malformed file is an error naming it."""

from __future__ import annotations

import json

import pytest

import peregrine
from peregrine import LLM, SamplingParams

from conftest import shared_dir

KW = dict(device="cpu", max_model_len=256, num_gpu_blocks_override=64, generation_config="vllm")


def gguf_dir():
    shared = shared_dir()
    if shared is None or not (shared / "models" / "gguf" / "reference.json").exists():
        pytest.skip("../shared/models/gguf absent")
    return shared / "models" / "gguf"


@pytest.mark.parametrize("name", ["pycoder-tiny-q4_k.gguf", "pycoder-tiny-q8_0.gguf"])
def test_gguf_greedy_and_tokenizer(name):
    folder = gguf_dir()
    ref = json.loads((folder / "reference.json").read_text())
    llm = LLM(str(folder / name), **KW)
    tok = llm.get_tokenizer()
    for i in range(2):
        assert tok.encode(ref["cases"][i]["prompt"], add_special_tokens=False) == ref["llamacpp_tokenize"]["ids"][i]
    case = ref["cases"][0]
    out = llm.generate({"prompt_token_ids": case["prompt_ids"]},
                       SamplingParams(max_tokens=8, temperature=0, ignore_eos=True), use_tqdm=False)
    native = ref["files"][name]["results"][0]
    for step, (got, want) in enumerate(zip(out[0].outputs[0].token_ids, native["output_ids"])):
        if got != want:
            assert native["top1_margin"][step] < 0.1, f"step {step}"
            break
    text = llm.generate(case["prompt"], SamplingParams(max_tokens=4, temperature=0), use_tqdm=False)
    assert list(text[0].prompt_token_ids) == [1] + ref["llamacpp_tokenize"]["ids"][0]
    llm.shutdown()


def test_gguf_defect_names_the_file(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x01" * 10)
    with pytest.raises(peregrine.PeregrineError, match="bad.gguf: truncated"):
        LLM(str(bad), **KW)


def test_gguf_with_an_hf_tokenizer_folder():
    folder = gguf_dir()
    ref = json.loads((folder / "reference.json").read_text())
    from conftest import MODEL
    llm = LLM(str(folder / "pycoder-tiny-q8_0.gguf"), tokenizer=str(MODEL), **KW)
    for case in ref["cases"][:3]:  # the prompt ids are HF's tokenization
        assert llm.get_tokenizer().encode(case["prompt"]) == case["prompt_ids"]
    llm.shutdown()
