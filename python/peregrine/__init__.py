"""Peregrine's Python API: vLLM's offline and streaming interfaces over Peregrine's engine.

    from peregrine import LLM, SamplingParams

``LLM`` (offline batches: generate, chat), ``AsyncLLM`` (streaming under asyncio), ``SamplingParams``,
``RequestOutput`` / ``CompletionOutput`` / ``Logprob`` with vLLM's names and meanings. Errors: ``TypeError`` and
``ValueError`` for bad arguments (``InvalidArgumentError`` and ``UnsupportedError`` are ValueErrors), and
``PeregrineError`` (with a ``code``) for what the engine refuses or fails at.
"""

from ._core import (InvalidArgumentError, NotFoundError, PeregrineError, UnsupportedError)
from ._core import __version__
from .async_llm import AsyncLLM, AsyncLLMEngine
from .engine_args import AsyncEngineArgs, EngineArgs
from .inputs import PromptType, TextPrompt, TokensPrompt
from .llm import LLM
from .outputs import CompletionOutput, Logprob, RequestMetrics, RequestOutput
from .sampling_params import GuidedDecodingParams, RequestOutputKind, SamplingParams, StructuredOutputsParams
from .tokenizer import Tokenizer

__all__ = [
    "LLM", "AsyncLLM", "AsyncLLMEngine", "EngineArgs", "AsyncEngineArgs", "SamplingParams", "RequestOutputKind",
    "StructuredOutputsParams", "GuidedDecodingParams",
    "RequestOutput", "CompletionOutput", "Logprob", "RequestMetrics", "PromptType", "TextPrompt", "TokensPrompt",
    "Tokenizer", "PeregrineError", "InvalidArgumentError", "NotFoundError", "UnsupportedError", "__version__",
]
