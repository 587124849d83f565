"""Engine arguments with vLLM's names (``LLM(model, **kwargs)``, ``EngineArgs``, ``AsyncEngineArgs``), turned into
the engine's ``EngineConfig`` (include/peregrine/engine_config.h), whose ``validate()`` checks the values.

An argument vLLM has and Peregrine does not implement yet is refused by name with ``peregrine.UnsupportedError``
(a ``ValueError``) unless it has its "off" value; an argument neither knows raises ``TypeError``, as vLLM does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any, Optional

from . import _core

__all__ = ["EngineArgs", "AsyncEngineArgs"]

# vLLM name -> (EngineConfig field, expected type). None as a value means "derive it".
_MAPPED: dict[str, tuple[str, type]] = {
    "tokenizer": ("tokenizer", str),
    "skip_tokenizer_init": ("skip_tokenizer_init", bool),
    "tensor_parallel_size": ("tensor_parallel_size", int),
    "dtype": ("dtype", str),
    "seed": ("seed", int),
    "gpu_memory_utilization": ("gpu_memory_utilization", float),
    "enforce_eager": ("enforce_eager", bool),
    "max_model_len": ("max_model_len", int),
    "max_num_seqs": ("max_num_seqs", int),
    "max_num_batched_tokens": ("max_num_batched_tokens", int),
    "block_size": ("block_size", int),
    "enable_prefix_caching": ("enable_prefix_caching", bool),
    "device": ("device", str),
    "generation_config": ("generation_config", str),
    "quantization": ("quantization", str),
    "kv_cache_dtype": ("kv_cache_dtype", str),
    "num_gpu_blocks_override": ("num_kv_blocks_override", int),
    "kv_cache_memory_bytes": ("kv_cache_memory_bytes", int),
    "kv_offloading_size": ("kv_offloading_size", float),
    "kv_cache_dir": ("kv_cache_dir", str),
    "kv_cache_disk_gb": ("kv_cache_disk_gb", float),
}

# Options of later work: accepted only with the value that means "off" (what vLLM does by default). When the engine
# gains one (an EngineConfig field), move it to _MAPPED, or convert it in build_config as speculative_config is.
_NOT_YET: dict[str, tuple[Any, str]] = {
    "enable_lora": (False, "LoRA adapters are not supported yet"),
    "pipeline_parallel_size": (1, "Peregrine runs a model on one device (use 1)"),
    "data_parallel_size": (1, "Peregrine runs a model on one device (use 1)"),
    "cpu_offload_gb": (0, "CPU weight offloading is not supported"),
    "tokenizer_mode": ("auto", "only tokenizer_mode='auto' (tokenizer.json) is supported"),
    "revision": (None, "models are local folders; there are no revisions to choose"),
    "tokenizer_revision": (None, "models are local folders; there are no revisions to choose"),
    "hf_overrides": (None, "config overrides are not supported yet"),
    "max_logprobs": (20, "at most 20 logprobs are returned per token"),
}

# Accepted and without effect here (vLLM knobs that have nothing to act on in Peregrine).
_NO_EFFECT = {
    "trust_remote_code",   # no model code is ever run
    "disable_log_stats",   # no periodic stats are logged
    "enable_log_requests",
    "disable_log_requests",
    "swap_space",          # preemption recomputes; nothing is swapped to the CPU
    "disable_custom_all_reduce",
}

_DTYPES = {"auto": "auto", "half": "float16", "float16": "float16", "bfloat16": "bfloat16", "float": "float32",
           "float32": "float32"}


def _dtype_name(value: Any) -> str:
    if not isinstance(value, str):
        value = str(value)  # torch.bfloat16 -> "torch.bfloat16"
        value = value.removeprefix("torch.")
    if value not in _DTYPES:
        raise _core.InvalidArgumentError(f"dtype: unknown dtype '{value}' (expected one of {', '.join(_DTYPES)})")
    return _DTYPES[value]


def _check_type(caller: str, name: str, value: Any, expected: type) -> Any:
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if expected is int and isinstance(value, bool):
        raise TypeError(f"{caller}: {name} must be an int, got bool")
    if not isinstance(value, expected):
        raise TypeError(f"{caller}: {name} must be {expected.__name__}, got {type(value).__name__}")
    return value


def build_config(caller: str, model: Any, kwargs: dict[str, Any]) -> "_core.EngineConfig":
    """EngineConfig from vLLM-named arguments; `caller` names the API in messages ("LLM()")."""
    if not isinstance(model, str):
        model = str(model)  # pathlib.Path
    config = _core.EngineConfig()
    config.model = model
    for name, value in kwargs.items():
        if name == "speculative_config":
            if value is None:
                continue
            if not isinstance(value, dict):
                raise TypeError(f"{caller}: speculative_config must be a dict, got {type(value).__name__}")
            config.set_speculative_config(json.dumps(value))  # checked key by key, as --speculative-config is
        elif name in _MAPPED:
            if value is None:
                continue  # derive it, as vLLM does for None
            target, expected = _MAPPED[name]
            if name == "dtype":
                value = _dtype_name(value)
            else:
                value = _check_type(caller, name, value, expected)
            if name == "seed":
                value &= 2**64 - 1
            setattr(config, target, value)
        elif name in _NOT_YET:
            off, why = _NOT_YET[name]
            if not (value is None or value == off or (off is None and not value)):
                raise _core.UnsupportedError(f"{name}={value!r} is not supported: {why}")
        elif name in _NO_EFFECT:
            continue
        else:
            raise TypeError(f"{caller} got an unexpected keyword argument '{name}'")
    config.validate()
    return config


@dataclass
class EngineArgs:
    """vLLM's EngineArgs: the engine arguments as one object (``LLM(args.model, **args.to_kwargs())``)."""

    model: str
    tokenizer: Optional[str] = None
    skip_tokenizer_init: bool = False
    tensor_parallel_size: int = 1
    dtype: str = "auto"
    seed: Optional[int] = None
    gpu_memory_utilization: float = 0.9
    enforce_eager: bool = False
    kv_offloading_size: Optional[float] = None
    kv_cache_dir: Optional[str] = None
    kv_cache_disk_gb: Optional[float] = None
    max_model_len: Optional[int] = None
    max_num_seqs: Optional[int] = None
    max_num_batched_tokens: Optional[int] = None
    block_size: Optional[int] = None
    enable_prefix_caching: Optional[bool] = None
    device: str = "auto"
    generation_config: str = "auto"
    num_gpu_blocks_override: Optional[int] = None
    kv_cache_memory_bytes: Optional[int] = None
    speculative_config: Optional[dict[str, Any]] = None
    quantization: Optional[str] = None
    kv_cache_dtype: str = "auto"
    trust_remote_code: bool = False
    disable_log_stats: bool = False

    def to_kwargs(self) -> dict[str, Any]:
        """The arguments other than model, for LLM(model, **kwargs)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "model"}


@dataclass
class AsyncEngineArgs(EngineArgs):
    """vLLM's AsyncEngineArgs (for ``AsyncLLM.from_engine_args``)."""

    enable_log_requests: bool = False
