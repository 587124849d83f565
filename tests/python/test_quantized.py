"""LLM(quantization=...): quantized checkpoints in their real formats (../shared/models/quant) load through the
Python API with their format detected or insisted on, give the reference's greedy ids, and a mismatch is a
ValueError naming the file, the field and the value."""

from __future__ import annotations

import json

import pytest

import peregrine
from peregrine import LLM, SamplingParams

from conftest import shared_dir

KW = dict(device="cpu", max_model_len=256, num_gpu_blocks_override=64, skip_tokenizer_init=True)


def quant_dir(name):
    shared = shared_dir()
    if shared is None or not (shared / "models" / "quant" / name / "config.json").exists():
        pytest.skip(f"../shared/models/quant/{name} absent")
    return shared / "models" / "quant" / name


@pytest.mark.parametrize("name,method", [("gptq-w4g128-actorder-asym", "gptq"), ("awq-w4g64", "awq_marlin"),
                                         ("ct-w4a16-g128", None)])
def test_quantized_checkpoint_greedy_ids(name, method):
    folder = quant_dir(name)
    ref = json.loads((folder / "reference.json").read_text())["cases"][0]
    llm = LLM(str(folder), quantization=method, **KW)
    out = llm.generate({"prompt_token_ids": ref["prompt_ids"]},
                       SamplingParams(max_tokens=8, temperature=0, ignore_eos=True), use_tqdm=False)
    ids = list(out[0].outputs[0].token_ids)
    for step, (got, want, margin) in enumerate(zip(ids, ref["output_ids"], ref["top1_margin"])):
        if margin < 2e-3:
            break
        assert got == want, f"step {step}"


def test_quantization_mismatch_is_a_value_error():
    folder = quant_dir("gptq-w4g32-sym")
    with pytest.raises(ValueError) as info:
        LLM(str(folder), quantization="awq", **KW)
    assert "quantization_config.quant_method" in str(info.value) and "'gptq'" in str(info.value)



def test_int8_w8a8_loads_and_static_activations_are_refused(tmp_path):
    folder = quant_dir("ct-w8a8-int8")
    llm = LLM(str(folder), **KW)  # W8A8 int8 with dynamic per-token activations is supported (issue 12)
    out = llm.generate({"prompt_token_ids": [1, 2, 3]}, SamplingParams(max_tokens=2, temperature=0, ignore_eos=True),
                       use_tqdm=False)
    assert len(out[0].outputs[0].token_ids) == 2
    # The same checkpoint declaring static activation scales is not: refused naming the field and the value.
    copy = tmp_path / "static"
    copy.mkdir()
    for f in folder.iterdir():
        if f.name != "config.json":
            (copy / f.name).symlink_to(f)
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"]["config_groups"]["group_0"]["input_activations"]["dynamic"] = False
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(peregrine.UnsupportedError) as info:
        LLM(str(copy), **KW)
    assert "dynamic" in str(info.value)
