"""What generation returns, with vLLM's classes and fields: RequestOutput, CompletionOutput, Logprob.

``logprobs`` of a completion is a list with one ``dict[int, Logprob]`` per generated token: the sampled token
first (with its rank in the whole vocabulary), then the top-k alternatives best first (ranks 1..k), each token
once. ``prompt_logprobs`` is the same per prompt token, with ``None`` for the first (nothing predicts it).
``cumulative_logprob`` is the sum of the sampled tokens' log-probabilities when logprobs were asked for, else
``None``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Union

__all__ = ["Logprob", "CompletionOutput", "RequestOutput", "RequestMetrics", "SampleLogprobs", "PromptLogprobs"]


@dataclass
class Logprob:
    """One token's log-probability, its rank in the distribution (1 = most likely) and its text."""

    logprob: float
    rank: Optional[int] = None
    decoded_token: Optional[str] = None


SampleLogprobs = list[dict[int, Logprob]]
PromptLogprobs = list[Optional[dict[int, Logprob]]]


@dataclass
class CompletionOutput:
    """One of the n completions of a request."""

    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: Optional[float]
    logprobs: Optional[SampleLogprobs]
    finish_reason: Optional[str] = None  # "stop", "length", "abort"; None while running
    stop_reason: Union[int, str, None] = None  # the stop string or stop token id that ended it
    lora_request: Any = None

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestMetrics:
    """When the request arrived, was first scheduled, got its first token and finished (seconds on the engine's
    clock, which starts when the engine is created)."""

    arrival_time: float
    first_scheduled_time: Optional[float]
    first_token_time: Optional[float]
    finished_time: Optional[float]

    @property
    def time_in_queue(self) -> Optional[float]:
        if self.first_scheduled_time is None:
            return None
        return self.first_scheduled_time - self.arrival_time


@dataclass
class RequestOutput:
    """The output of one prompt: its completions and the prompt as the engine saw it."""

    request_id: str
    prompt: Optional[str]
    prompt_token_ids: Optional[list[int]]
    prompt_logprobs: Optional[PromptLogprobs]
    outputs: list[CompletionOutput]
    finished: bool
    metrics: Optional[RequestMetrics] = None
    lora_request: Any = None
    encoder_prompt: Optional[str] = None
    encoder_prompt_token_ids: Optional[list[int]] = None
    num_cached_tokens: Optional[int] = None
    kv_transfer_params: Optional[dict[str, Any]] = field(default=None, repr=False)


def _logprob_dict(position: Any, detokenize: bool) -> dict[int, Logprob]:
    chosen = position.chosen
    out = {chosen.token_id: Logprob(chosen.logprob, chosen.rank, chosen.text if detokenize else None)}
    for t in position.top:
        if t.token_id not in out:
            out[t.token_id] = Logprob(t.logprob, t.rank, t.text if detokenize else None)
    return out


def _sample_logprobs(positions: list, detokenize: bool) -> SampleLogprobs:
    return [_logprob_dict(p, detokenize) for p in positions]


def _prompt_logprobs(positions: list, detokenize: bool) -> PromptLogprobs:
    out: PromptLogprobs = [None]
    out.extend(_logprob_dict(p, detokenize) for p in positions[1:])
    return out


def _outputs(native: Any, fields: tuple, params: Any) -> list[CompletionOutput]:
    """The completions of native.fields() (logprobs read from the native outputs only when asked for)."""
    want_logprobs = params.logprobs is not None
    detokenize = params.detokenize
    natives = native.outputs if want_logprobs else None
    out = []
    for i, (index, text, token_ids, cumulative, finish_reason, stop_reason) in enumerate(fields):
        out.append(CompletionOutput(
            index, text if detokenize else "", token_ids, cumulative if want_logprobs else None,
            _sample_logprobs(natives[i].logprobs, detokenize) if want_logprobs else None, finish_reason, stop_reason))
    return out


def _request_output(native: Any, prompt: Optional[str], prompt_token_ids: list[int], params: Any,
                    first: bool = True) -> RequestOutput:
    """A request's output (finished and accumulated by the engine for LLM.generate; a delta for AsyncLLM, whose
    prompt logprobs come with the first)."""
    request_id, finished, num_cached_tokens, timings, _, outputs = native.fields()
    prompt_logprobs = None
    if first and params.prompt_logprobs is not None:
        prompt_logprobs = _prompt_logprobs(native.prompt_logprobs, params.detokenize)
    arrival, scheduled, first_token, finished_time = timings
    return RequestOutput(request_id, prompt, prompt_token_ids, prompt_logprobs, _outputs(native, outputs, params),
                         finished, RequestMetrics(arrival, scheduled or None, first_token or None, finished_time or None),
                         num_cached_tokens=num_cached_tokens)
