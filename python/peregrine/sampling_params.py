"""SamplingParams: how one request is sampled and when it stops, with vLLM's fields, order and defaults.

Values are checked when the object is made, by the engine's own validator (``SamplingParams::validate`` in
``include/peregrine/sampling_params.h``, the one the server uses), so the messages are the server's. Checks that
need the model (token ids inside the vocabulary, prompt plus ``max_tokens`` within the context) run again when a
request is submitted. Wrong types raise ``TypeError``; wrong values ``ValueError``
(``peregrine.InvalidArgumentError``); fields Peregrine does not implement yet ``peregrine.UnsupportedError``
(also a ``ValueError``) naming the field.
"""

from __future__ import annotations

import copy
import enum
from dataclasses import dataclass
from typing import Any, Optional, Union

from . import _core

__all__ = ["SamplingParams", "RequestOutputKind", "StructuredOutputsParams", "GuidedDecodingParams"]

_INT32_MAX = 2**31 - 1
_UINT64_MASK = 2**64 - 1


class RequestOutputKind(enum.IntEnum):
    """What a streamed request yields (``AsyncLLM.generate``): everything so far, only what is new, or only the end."""

    CUMULATIVE = 0
    DELTA = 1
    FINAL_ONLY = 2


def _type_name(value: Any) -> str:
    return type(value).__name__


def _check_int(name: str, value: Any, optional: bool = False, int32: bool = True) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int{' or None' if optional else ''}, got {_type_name(value)}")
    if int32 and not -_INT32_MAX - 1 <= value <= _INT32_MAX:
        raise _core.InvalidArgumentError(f"{name} must fit in 32 bits, got {value}")


def _check_float(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a float, got {_type_name(value)}")


def _check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {_type_name(value)}")


def _unsupported(name: str, why: str) -> None:
    raise _core.UnsupportedError(f"{name}: {why}")


@dataclass
class StructuredOutputsParams:
    """A constraint on the output (vLLM's ``StructuredOutputsParams``): exactly one of ``json`` (a JSON Schema as a
    dict or JSON text), ``regex``, ``choice`` (a list of strings), ``grammar`` (EBNF ``root ::= ...`` or Lark
    ``start: ...``) and ``json_object`` (any JSON object). The engine compiles it when the request is submitted
    (errors raise ``ValueError`` naming the problem) and masks every token it does not allow."""

    json: Optional[Union[str, dict]] = None
    regex: Optional[str] = None
    choice: Optional[list[str]] = None
    grammar: Optional[str] = None
    json_object: Optional[bool] = None
    disable_fallback: bool = False
    disable_any_whitespace: bool = False
    disable_additional_properties: bool = False
    whitespace_pattern: Optional[str] = None
    structural_tag: Optional[str] = None

    def _apply(self, p: "_core.NativeSamplingParams") -> None:
        import json as _json

        if self.whitespace_pattern is not None:
            _unsupported("structured_outputs.whitespace_pattern", "custom whitespace patterns are not supported")
        if self.structural_tag is not None:
            _unsupported("structured_outputs.structural_tag", "structural tags are not supported")
        schema = self.json
        if schema is not None and not isinstance(schema, str):
            schema = _json.dumps(schema)
        choice = None if self.choice is None else [str(c) for c in self.choice]
        p.set_structured_outputs(schema, self.regex, choice, self.grammar, bool(self.json_object))


# vLLM's older name.
GuidedDecodingParams = StructuredOutputsParams


@dataclass
class SamplingParams:
    """Sampling parameters for text generation (vLLM's ``SamplingParams``).

    n: completions per prompt (they share the prompt's KV blocks; completion i samples from seed + i).
    presence_penalty, frequency_penalty: in [-2, 2], on output tokens. repetition_penalty: > 0 (1 = off), on prompt
    and output tokens. temperature: >= 0 (0 = greedy). top_p: (0, 1]. top_k: 0 or -1 = every token. min_p: [0, 1].
    seed: the request's own random stream (None = the engine's seed stream).
    stop: strings that end the output (not included unless include_stop_str_in_output). stop_token_ids: tokens that
    end it. ignore_eos: keep going past end-of-sequence. max_tokens: tokens to generate (None = until the context
    is full). min_tokens: eos, stop tokens and stop strings are ignored before this many.
    logprobs: top log-probabilities per output token (0 = only the sampled token; at most 20). prompt_logprobs: the
    same per prompt token. detokenize: False leaves the text empty. skip_special_tokens,
    spaces_between_special_tokens: how text is decoded. truncate_prompt_tokens: keep only the last k prompt
    tokens (-1 = the model's maximum length). output_kind: what AsyncLLM.generate yields. logit_bias: token id ->
    bias in [-100, 100]. extra_args: kept for the caller, unused by the engine.
    """

    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: Optional[int] = None
    stop: Optional[Union[str, list[str]]] = None
    stop_token_ids: Optional[list[int]] = None
    ignore_eos: bool = False
    max_tokens: Optional[int] = 16
    min_tokens: int = 0
    logprobs: Optional[int] = None
    prompt_logprobs: Optional[int] = None
    detokenize: bool = True
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    logits_processors: Optional[Any] = None
    include_stop_str_in_output: bool = False
    truncate_prompt_tokens: Optional[int] = None
    output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE
    structured_outputs: Optional[Any] = None
    guided_decoding: Optional[Any] = None
    logit_bias: Optional[dict[int, float]] = None
    allowed_token_ids: Optional[list[int]] = None
    extra_args: Optional[dict[str, Any]] = None
    bad_words: Optional[list[str]] = None

    def __post_init__(self) -> None:
        _check_int("n", self.n)
        for name in ("presence_penalty", "frequency_penalty", "repetition_penalty", "temperature", "top_p", "min_p"):
            _check_float(name, getattr(self, name))
        _check_int("top_k", self.top_k)
        _check_int("seed", self.seed, optional=True, int32=False)
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        elif self.stop is None:
            self.stop = []
        else:
            self.stop = list(self.stop)
            for s in self.stop:
                if not isinstance(s, str):
                    raise TypeError(f"stop must be a string or a list of strings, got an element of type {_type_name(s)}")
        self.stop_token_ids = [] if self.stop_token_ids is None else list(self.stop_token_ids)
        for t in self.stop_token_ids:
            _check_int("stop_token_ids[...]", t)
        _check_bool("ignore_eos", self.ignore_eos)
        _check_int("max_tokens", self.max_tokens, optional=True)
        _check_int("min_tokens", self.min_tokens)
        _check_int("logprobs", self.logprobs, optional=True)
        _check_int("prompt_logprobs", self.prompt_logprobs, optional=True)
        for name in ("detokenize", "skip_special_tokens", "spaces_between_special_tokens",
                     "include_stop_str_in_output"):
            _check_bool(name, getattr(self, name))
        _check_int("truncate_prompt_tokens", self.truncate_prompt_tokens, optional=True)
        if self.truncate_prompt_tokens is not None and (self.truncate_prompt_tokens < -1 or self.truncate_prompt_tokens == 0):
            raise _core.InvalidArgumentError(
                f"truncate_prompt_tokens must be -1 (the model's maximum length) or at least 1, got "
                f"{self.truncate_prompt_tokens}")
        self.output_kind = RequestOutputKind(self.output_kind)
        if self.logit_bias is not None:
            if not isinstance(self.logit_bias, dict):
                raise TypeError(f"logit_bias must be a dict of token id -> bias, got {_type_name(self.logit_bias)}")
            bias_by_id = {}
            for token, bias in self.logit_bias.items():
                if isinstance(token, str) and token.lstrip("-").isdigit():
                    token = int(token)  # JSON-style keys, as the OpenAI API sends them
                _check_int("logit_bias keys", token)
                _check_float(f"logit_bias[{token}]", bias)
                bias_by_id[token] = bias
            self.logit_bias = bias_by_id
        if self.extra_args is not None and not isinstance(self.extra_args, dict):
            raise TypeError(f"extra_args must be a dict, got {_type_name(self.extra_args)}")
        if self.logits_processors:
            _unsupported("logits_processors", "custom logits processors are not supported (the engine runs no Python)")
        if self.structured_outputs is None and self.guided_decoding is not None:
            self.structured_outputs = self.guided_decoding
        if self.structured_outputs is not None and not isinstance(self.structured_outputs, StructuredOutputsParams):
            raise TypeError(f"structured_outputs must be a StructuredOutputsParams, got {_type_name(self.structured_outputs)}")
        if self.allowed_token_ids is not None:
            _unsupported("allowed_token_ids", "restricting sampling to a token list is not supported yet")
        if self.bad_words:
            _unsupported("bad_words", "banned word lists are not supported yet")
        if not self.detokenize and self.stop:
            raise _core.InvalidArgumentError("stop strings need detokenize=True")
        # The engine's checks (the server's messages); token ids against the vocabulary run at submission.
        self._to_native().validate(0)

    def _to_native(self) -> "_core.NativeSamplingParams":
        p = _core.NativeSamplingParams()
        p.n = self.n
        p.temperature = float(self.temperature)
        p.top_p = float(self.top_p)
        p.top_k = self.top_k
        p.min_p = float(self.min_p)
        p.repetition_penalty = float(self.repetition_penalty)
        p.presence_penalty = float(self.presence_penalty)
        p.frequency_penalty = float(self.frequency_penalty)
        if self.logit_bias:
            p.logit_bias = [(int(k), float(v)) for k, v in self.logit_bias.items()]
        if self.seed is not None:
            p.seed = self.seed & _UINT64_MASK
        p.stop = list(self.stop or [])
        p.stop_token_ids = list(self.stop_token_ids or [])
        p.include_stop_str_in_output = self.include_stop_str_in_output
        p.ignore_eos = self.ignore_eos
        p.min_tokens = self.min_tokens
        p.max_tokens = self.max_tokens
        p.logprobs = self.logprobs
        p.prompt_logprobs = self.prompt_logprobs
        p.skip_special_tokens = self.skip_special_tokens
        p.spaces_between_special_tokens = self.spaces_between_special_tokens
        if self.structured_outputs is not None:
            self.structured_outputs._apply(p)
        return p

    def clone(self) -> "SamplingParams":
        return copy.deepcopy(self)

    @property
    def sampling_type(self) -> str:
        """\"greedy\" at temperature 0, else \"random\" (\"random_seed\" with a seed)."""
        if self.temperature < 1e-5:
            return "greedy"
        return "random_seed" if self.seed is not None else "random"

    @property
    def all_stop_token_ids(self) -> set[int]:
        return set(self.stop_token_ids or [])
