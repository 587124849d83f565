"""Prompt types, as vLLM's ``vllm.inputs``: a string, ``{"prompt": str}`` or ``{"prompt_token_ids": [int, ...]}``."""

from __future__ import annotations

from typing import Any, Optional, Sequence, TypedDict, Union

try:
    from typing import NotRequired
except ImportError:  # Python < 3.11
    from typing_extensions import NotRequired  # type: ignore

__all__ = ["TextPrompt", "TokensPrompt", "PromptType"]


class TextPrompt(TypedDict):
    prompt: str
    multi_modal_data: NotRequired[Any]
    mm_processor_kwargs: NotRequired[Any]
    cache_salt: NotRequired[str]


class TokensPrompt(TypedDict):
    prompt_token_ids: list[int]
    prompt: NotRequired[str]
    multi_modal_data: NotRequired[Any]
    mm_processor_kwargs: NotRequired[Any]
    cache_salt: NotRequired[str]


PromptType = Union[str, TextPrompt, TokensPrompt]

# Keys that change nothing here: cache_salt isolates prefix-cache entries between tenants, and one process's
# LLM has one tenant.
_IGNORED_KEYS = {"cache_salt"}
_MULTIMODAL_KEYS = {"multi_modal_data", "mm_processor_kwargs", "multi_modal_uuids"}


def _is_single(prompt: Any) -> bool:
    return isinstance(prompt, (str, dict))


def parse_prompts(prompts: Union[PromptType, Sequence[PromptType]]) -> list[tuple[Optional[str], Optional[list[int]]]]:
    """(text, token ids) per prompt; exactly one of them is set (token prompts may carry their text too)."""
    items = [prompts] if _is_single(prompts) else prompts
    if not isinstance(items, (list, tuple)):
        raise TypeError(f"prompts must be a string, a prompt dict or a list of them, got {type(prompts).__name__}")
    parsed: list[tuple[Optional[str], Optional[list[int]]]] = []
    for i, p in enumerate(items):
        where = f"prompts[{i}]"
        if isinstance(p, str):
            parsed.append((p, None))
            continue
        if not isinstance(p, dict):
            raise TypeError(f"{where}: expected a string or a dict with 'prompt' or 'prompt_token_ids', got "
                            f"{type(p).__name__}")
        for key in p:
            if key in _MULTIMODAL_KEYS:
                if p[key]:
                    from . import _core

                    raise _core.UnsupportedError(f"{where}.{key}: multimodal inputs are not supported")
            elif key not in ("prompt", "prompt_token_ids") and key not in _IGNORED_KEYS:
                raise ValueError(f"{where}: unknown prompt field '{key}' (expected 'prompt' or 'prompt_token_ids')")
        if "prompt_token_ids" in p:
            ids = p["prompt_token_ids"]
            if not isinstance(ids, (list, tuple)):
                raise TypeError(f"{where}.prompt_token_ids must be a list of ints, got {type(ids).__name__}")
            # The elements are checked by the conversion to the engine's types (check_token_ids names a bad one).
            text = p.get("prompt")
            parsed.append((text if isinstance(text, str) else None, list(ids)))
        elif "prompt" in p:
            if not isinstance(p["prompt"], str):
                raise TypeError(f"{where}.prompt must be a string, got {type(p['prompt']).__name__}")
            parsed.append((p["prompt"], None))
        else:
            raise ValueError(f"{where}: a prompt dict needs 'prompt' or 'prompt_token_ids'")
    return parsed


def check_token_ids(prompt_ids: list[list[int]]) -> None:
    """Raises TypeError naming the first token id that is not a 32-bit int (after the engine's conversion failed)."""
    for i, ids in enumerate(prompt_ids):
        for j, t in enumerate(ids):
            if isinstance(t, bool) or not isinstance(t, int) or not -2**31 <= t < 2**31:
                raise TypeError(f"prompts[{i}].prompt_token_ids[{j}] must be an int (a token id), got {t!r}")
