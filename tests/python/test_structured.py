"""Structured outputs through the Python API (vLLM's StructuredOutputsParams / GuidedDecodingParams)."""

import json
import re

import pytest

import peregrine
from peregrine import GuidedDecodingParams, SamplingParams, StructuredOutputsParams


def test_json_schema_regex_choice_and_grammar(llm):
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                               "n": {"type": "integer", "minimum": 0, "maximum": 9}},
              "required": ["name", "n"]}
    params = [
        SamplingParams(temperature=0, max_tokens=80, structured_outputs=StructuredOutputsParams(json=schema)),
        SamplingParams(temperature=0.8, seed=1, max_tokens=20, structured_outputs=StructuredOutputsParams(regex=r"[a-z]{3}-\d{2}")),
        SamplingParams(temperature=0, max_tokens=5, guided_decoding=GuidedDecodingParams(choice=["left", "right"])),
        SamplingParams(temperature=0, max_tokens=20,
                       structured_outputs=StructuredOutputsParams(grammar='root ::= "x" [0-9] [0-9]? ";"')),
    ]
    outs = llm.generate(["def f(x):"] * 4, params)
    value = json.loads(outs[0].outputs[0].text)
    assert set(value) == {"name", "n"} and 0 <= value["n"] <= 9 and len(value["name"]) <= 12
    assert re.fullmatch(r"[a-z]{3}-\d{2}", outs[1].outputs[0].text)
    assert outs[2].outputs[0].text in ("left", "right")
    assert re.fullmatch(r"x[0-9][0-9]?;", outs[3].outputs[0].text)


def test_bad_constraints_raise_value_errors(llm):
    with pytest.raises(ValueError, match="uniqueItems"):
        llm.generate("x", SamplingParams(structured_outputs=StructuredOutputsParams(json={"type": "array", "uniqueItems": True})))
    with pytest.raises(ValueError, match="exactly one"):
        SamplingParams(structured_outputs=StructuredOutputsParams(regex="a", choice=["a"]))
    with pytest.raises(peregrine.UnsupportedError, match="whitespace_pattern"):
        SamplingParams(structured_outputs=StructuredOutputsParams(json={}, whitespace_pattern=" "))
