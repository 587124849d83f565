"""AsyncLLM: streaming generation under asyncio (vLLM's ``AsyncLLM``), over the same Engine.

    engine = AsyncLLM("models/pycoder-tiny")
    params = SamplingParams(max_tokens=64, output_kind=RequestOutputKind.DELTA)
    async for out in engine.generate("def fibonacci(n):", params, request_id="r1"):
        print(out.outputs[0].text, end="", flush=True)

The engine loop thread leaves each request's deltas in one ``OutputStream`` (a queue plus an eventfd); the event
loop watches the eventfd (``add_reader``) and hands each delta to the generator of its request, so neither side
waits for the other and the loop never blocks. A generator that is closed or cancelled before its request ends
aborts the request in the engine. One event loop at a time may use an AsyncLLM.
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncGenerator, Optional

from . import _core
from .engine_args import AsyncEngineArgs
from .inputs import PromptType, check_token_ids, parse_prompts
from .llm import _EngineClient, _refuse_lora
from .outputs import CompletionOutput, RequestOutput, _request_output
from .sampling_params import RequestOutputKind, SamplingParams
from .tokenizer import Tokenizer

__all__ = ["AsyncLLM", "AsyncLLMEngine"]


class _Accumulated:
    """The request so far, built from deltas (what CUMULATIVE and FINAL_ONLY yield)."""

    def __init__(self, n: int) -> None:
        self.outputs = [CompletionOutput(index=i, text="", token_ids=[], cumulative_logprob=None, logprobs=None)
                        for i in range(n)]

    def add(self, delta: CompletionOutput) -> None:
        acc = self.outputs[delta.index]
        acc.text += delta.text
        acc.token_ids.extend(delta.token_ids)
        if delta.logprobs is not None:
            if acc.logprobs is None:
                acc.logprobs = []
            acc.logprobs.extend(delta.logprobs)
        acc.cumulative_logprob = delta.cumulative_logprob
        acc.finish_reason = delta.finish_reason
        acc.stop_reason = delta.stop_reason


class AsyncLLM(_EngineClient):
    """Streams RequestOutputs per request. Takes the same arguments as ``LLM``."""

    def __init__(self, model: str, *, tokenizer: Optional[str] = None, **kwargs: Any) -> None:
        super().__init__("AsyncLLM()", model, {"tokenizer": tokenizer, **kwargs})
        self._stream = _core.OutputStream()
        self._queues: dict[str, asyncio.Queue] = {}
        self._loop: Optional[asyncio.AbstractEventLoop] = None

    @classmethod
    def from_engine_args(cls, engine_args: AsyncEngineArgs) -> "AsyncLLM":
        return cls(engine_args.model, **engine_args.to_kwargs())

    def _attach(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            return
        if self._loop is not None and not self._loop.is_closed():
            if self._queues:
                raise RuntimeError("AsyncLLM is streaming on another event loop")
            self._loop.remove_reader(self._stream.fileno())
        loop.add_reader(self._stream.fileno(), self._on_readable)
        self._loop = loop

    def _on_readable(self) -> None:
        for delta in self._stream.drain():
            queue = self._queues.get(delta.request_id)
            if queue is not None:
                queue.put_nowait(delta)

    async def generate(self, prompt: PromptType, sampling_params: Optional[SamplingParams] = None,
                       request_id: Optional[str] = None, *, lora_request: Any = None,
                       priority: int = 0) -> AsyncGenerator[RequestOutput, None]:
        """Yields the request's RequestOutputs as tokens arrive: everything so far (output_kind CUMULATIVE, the
        default), only what is new (DELTA) or only the final one (FINAL_ONLY). The last has finished=True."""
        _refuse_lora(lora_request)
        if priority:
            raise _core.UnsupportedError("priority: priority scheduling is not supported yet (requests run FCFS)")
        if isinstance(prompt, (list, tuple)):
            raise TypeError("AsyncLLM.generate takes one prompt (a string or a prompt dict)")
        params = sampling_params if sampling_params is not None else self.get_default_sampling_params()
        if not isinstance(params, SamplingParams):
            raise TypeError(f"sampling_params must be a SamplingParams, got {type(params).__name__}")
        if request_id is None:
            raise TypeError("AsyncLLM.generate needs a request_id")
        if request_id in self._queues:
            raise _core.InvalidArgumentError(f"request id '{request_id}' is already in use")
        parsed = parse_prompts(prompt)
        prompt_ids = self._prompt_ids(parsed, [params], add_special_tokens=True)[0]
        self._attach()
        queue: asyncio.Queue = asyncio.Queue()
        self._queues[request_id] = queue
        finished = False
        try:
            try:
                self._engine.add_request(request_id, prompt_ids, params._to_native(), self._stream)
            except TypeError:
                check_token_ids([prompt_ids])
                raise
            kind = params.output_kind
            accumulated = _Accumulated(params.n)
            first = True
            prompt_logprobs = None
            while not finished:
                delta = await queue.get()
                if delta.error is not None:
                    finished = True
                    raise _core.PeregrineError(f"request {request_id} failed in the engine: {delta.error}")
                finished = delta.finished
                out = _request_output(delta, parsed[0][0], prompt_ids, params, first)
                if first:
                    prompt_logprobs = out.prompt_logprobs
                first = False
                if kind == RequestOutputKind.DELTA:
                    yield out
                    continue
                for c in out.outputs:
                    accumulated.add(c)
                if kind == RequestOutputKind.CUMULATIVE or finished:
                    yield RequestOutput(
                        request_id=request_id, prompt=out.prompt, prompt_token_ids=prompt_ids,
                        prompt_logprobs=prompt_logprobs,
                        outputs=[CompletionOutput(index=c.index, text=c.text, token_ids=list(c.token_ids),
                                                  cumulative_logprob=c.cumulative_logprob,
                                                  logprobs=list(c.logprobs) if c.logprobs is not None else None,
                                                  finish_reason=c.finish_reason, stop_reason=c.stop_reason)
                                 for c in accumulated.outputs],
                        finished=finished, metrics=out.metrics, num_cached_tokens=out.num_cached_tokens)
        finally:
            self._queues.pop(request_id, None)
            if not finished:
                self._engine.abort_request(request_id)

    async def abort(self, request_id: str) -> None:
        """Ends a request early (its generator yields a final output with finish_reason "abort")."""
        self._engine.abort_request(request_id)

    async def get_tokenizer(self) -> Tokenizer:  # type: ignore[override]
        return _EngineClient.get_tokenizer(self)

    def shutdown(self) -> None:
        """Aborts every request (their generators end with finish_reason "abort") and stops the engine."""
        if self._loop is not None and not self._loop.is_closed():
            self._engine.shutdown()
            # The final deltas reach the generators through the reader, which stays until they are drained.
            self._loop.call_soon_threadsafe(self._detach_when_idle)
        else:
            self._engine.shutdown()

    def _detach_when_idle(self) -> None:
        self._on_readable()
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._stream.fileno())
        self._loop = None

    def __del__(self) -> None:
        loop = getattr(self, "_loop", None)
        if loop is not None and not loop.is_closed():
            try:
                loop.remove_reader(self._stream.fileno())
            except Exception:
                pass


AsyncLLMEngine = AsyncLLM
