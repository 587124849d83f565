"""LLM: vLLM's offline API over Peregrine's engine (the same Engine the server runs; no second generation path).

    from peregrine import LLM, SamplingParams
    llm = LLM("models/pycoder-tiny")
    for out in llm.generate(["def fibonacci(n):"], SamplingParams(temperature=0, max_tokens=32)):
        print(out.outputs[0].text)

``generate`` submits every prompt to the engine and waits with the GIL released; every 50 ms it takes the GIL
back to run signal handlers (Ctrl-C aborts the batch's requests in the engine, then raises KeyboardInterrupt) and
to move the progress bar. Engines shut down when their LLM is garbage-collected, on ``shutdown()``, or at exit.
"""

from __future__ import annotations

import atexit
import itertools
import weakref
from typing import Any, Callable, Optional, Sequence, Union

from . import _core
from ._progress import Progress, make_bar
from .engine_args import build_config
from .inputs import PromptType, check_token_ids, parse_prompts
from .outputs import RequestOutput, _request_output
from .sampling_params import SamplingParams
from .tokenizer import Tokenizer, normalize_messages

__all__ = ["LLM"]

_live_engines: "weakref.WeakSet[Any]" = weakref.WeakSet()


@atexit.register
def _shutdown_all() -> None:
    for owner in list(_live_engines):
        owner.shutdown()


def _refuse_lora(lora_request: Any) -> None:
    if lora_request is not None:
        raise _core.UnsupportedError("lora_request: LoRA adapters are not supported yet")


class _EngineClient:
    """What LLM and AsyncLLM share: the engine, its tokenizer, prompt preparation."""

    def __init__(self, caller: str, model: str, kwargs: dict[str, Any]) -> None:
        config = build_config(caller, model, kwargs)
        self._engine = _core.Engine(config)
        self._tokenizer: Optional[Tokenizer] = None
        self._max_model_len: int = self._engine.info["max_model_len"]
        _live_engines.add(self)

    def shutdown(self) -> None:
        """Aborts what is running and stops the engine loop (idempotent)."""
        self._engine.shutdown()

    def get_tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            self._tokenizer = Tokenizer(self._engine)
        return self._tokenizer

    def get_default_sampling_params(self) -> SamplingParams:
        """SamplingParams() with the model's generation_config.json applied (temperature, top_p, top_k,
        repetition_penalty, max_new_tokens), as vLLM's generation_config='auto'."""
        d = self._engine.default_sampling_params()
        defaults = SamplingParams()
        return SamplingParams(temperature=d.temperature, top_p=d.top_p, top_k=d.top_k,
                              repetition_penalty=d.repetition_penalty,
                              max_tokens=d.max_tokens if d.max_tokens is not None else defaults.max_tokens)

    def _prompt_ids(self, parsed: list[tuple[Optional[str], Optional[list[int]]]],
                    params: Sequence[SamplingParams], add_special_tokens: bool) -> list[list[int]]:
        texts = [text for text, ids in parsed if ids is None]
        tokenized = iter(self._engine.tokenize_batch(texts, add_special_tokens) if texts else [])
        out = []
        for (text, ids), sp in zip(parsed, params):
            if ids is None:
                ids = next(tokenized)
            k = sp.truncate_prompt_tokens
            if k is not None:
                k = self._max_model_len if k == -1 else k
                ids = ids[-k:]
            out.append(ids)
        return out


class LLM(_EngineClient):
    """An LLM for offline batch inference (vLLM's ``LLM``).

    model: a Hugging Face model folder or a GGUF file. Keyword arguments take vLLM's engine argument names: tokenizer,
    skip_tokenizer_init, dtype ("auto", "float32", "bfloat16", "float16"/"half"), device ("auto", "cpu", "cuda"),
    max_model_len, max_num_seqs, max_num_batched_tokens, gpu_memory_utilization, enable_prefix_caching,
    block_size, seed, enforce_eager, generation_config, num_gpu_blocks_override, kv_cache_memory_bytes,
    kv_offloading_size (GiB of host memory for the prefix cache's host tier), kv_cache_dir and kv_cache_disk_gb (its
    disk tier, kept across restarts),
    tensor_parallel_size (1), speculative_config (vLLM's dict: ngram, lookahead, draft_model, self), quantization
    (gptq, awq, compressed-tensors or vLLM's marlin aliases: checked against the checkpoint's quantization_config;
    None detects it). kv_cache_dtype ("auto", or "fp8" / "fp8_e4m3" / "int8": a quantized KV cache with one scale per token and KV
    head); unknown arguments raise TypeError.
    """

    def __init__(self, model: str, *, tokenizer: Optional[str] = None, **kwargs: Any) -> None:
        super().__init__("LLM()", model, {"tokenizer": tokenizer, **kwargs})
        self._request_counter = itertools.count()

    def __enter__(self) -> "LLM":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        info = self._engine.info
        return f"LLM(model={info['model_path']!r}, backend={info['backend']!r}, dtype={info['dtype']!r})"

    def _params_for(self, count: int, sampling_params: Any) -> list[SamplingParams]:
        if sampling_params is None:
            return [self.get_default_sampling_params()] * count
        if isinstance(sampling_params, SamplingParams):
            return [sampling_params] * count
        if isinstance(sampling_params, (list, tuple)):
            if len(sampling_params) != count:
                raise ValueError("The lengths of prompts and sampling_params must be the same.")
            for i, sp in enumerate(sampling_params):
                if not isinstance(sp, SamplingParams):
                    raise TypeError(f"sampling_params[{i}] must be a SamplingParams, got {type(sp).__name__}")
            return list(sampling_params)
        raise TypeError(f"sampling_params must be a SamplingParams or a list of them, got "
                        f"{type(sampling_params).__name__}")

    def _run(self, parsed: list[tuple[Optional[str], Optional[list[int]]]], sampling_params: Any,
             use_tqdm: Union[bool, Callable[..., Any]], add_special_tokens: bool) -> list[RequestOutput]:
        params = self._params_for(len(parsed), sampling_params)
        prompt_ids = self._prompt_ids(parsed, params, add_special_tokens)
        native_by_object: dict[int, Any] = {}  # one conversion per distinct SamplingParams object
        natives = []
        for sp in params:
            native = native_by_object.get(id(sp))
            if native is None:
                native = native_by_object[id(sp)] = sp._to_native()
            natives.append(native)
        request_ids = [str(next(self._request_counter)) for _ in parsed]
        bar = make_bar(use_tqdm, len(parsed))
        try:
            results = self._engine.generate(prompt_ids, natives, request_ids, Progress(bar) if bar else None)
        except TypeError:
            check_token_ids(prompt_ids)  # names the bad id, if that was it
            raise
        finally:
            if bar is not None:
                bar.close()
        outputs = []
        for native, (text, _), ids, sp in zip(results, parsed, prompt_ids, params):
            if native.error is not None:
                raise _core.PeregrineError(f"request {native.request_id} failed in the engine: {native.error}")
            outputs.append(_request_output(native, text, ids, sp))
        return outputs

    def generate(self, prompts: Union[PromptType, Sequence[PromptType]],
                 sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None, *,
                 use_tqdm: Union[bool, Callable[..., Any]] = True, lora_request: Any = None,
                 priority: Optional[list[int]] = None) -> list[RequestOutput]:
        """Generates completions for the prompts (strings, {"prompt": ...} or {"prompt_token_ids": [...]}, or a
        list of them) with one SamplingParams for all or one per prompt (None = get_default_sampling_params()).
        Returns one RequestOutput per prompt, in order."""
        _refuse_lora(lora_request)
        if priority is not None and any(priority):
            raise _core.UnsupportedError("priority: priority scheduling is not supported yet (requests run FCFS)")
        return self._run(parse_prompts(prompts), sampling_params, use_tqdm, add_special_tokens=True)

    def chat(self, messages: Any, sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None, *,
             use_tqdm: Union[bool, Callable[..., Any]] = True, lora_request: Any = None,
             chat_template: Optional[str] = None, chat_template_content_format: str = "auto",
             add_generation_prompt: bool = True, continue_final_message: bool = False,
             tools: Optional[list[dict[str, Any]]] = None, chat_template_kwargs: Optional[dict[str, Any]] = None,
             mm_processor_kwargs: Any = None) -> list[RequestOutput]:
        """Generates replies to one conversation (a list of {"role", "content"} messages) or to a list of
        conversations. The prompt is rendered with the model's chat template, or with chat_template (the template
        text or a file) when given; tools and chat_template_kwargs are passed to the template;
        continue_final_message (with add_generation_prompt=False) continues the last message instead of
        starting a new one."""
        _refuse_lora(lora_request)
        if mm_processor_kwargs:
            raise _core.UnsupportedError("mm_processor_kwargs: multimodal inputs are not supported")
        batch = isinstance(messages, (list, tuple)) and len(messages) > 0 and isinstance(messages[0], (list, tuple))
        conversations = list(messages) if batch else [messages]
        if chat_template is None and not self._engine.info["has_chat_template"]:
            raise _core.InvalidArgumentError(
                "this model has no chat template (tokenizer_config.json has none and there is no "
                "chat_template.jinja); pass chat_template= to LLM.chat")
        prompts = []
        for i, conversation in enumerate(conversations):
            where = f"messages[{i}]" if batch else "messages"
            prompts.append(self._engine.apply_chat_template(
                normalize_messages(conversation, chat_template_content_format, where), add_generation_prompt,
                continue_final_message, tools, chat_template_kwargs, chat_template))
        return self._run([(p, None) for p in prompts], sampling_params, use_tqdm, add_special_tokens=False)
