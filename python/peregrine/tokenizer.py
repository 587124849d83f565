"""The engine's tokenizer and chat template as a Hugging Face-style object (``LLM.get_tokenizer()``).

Every call goes to the engine (``Engine::tokenize``, ``detokenize``, ``apply_chat_template``), so the ids and the
rendered prompts are exactly those the engine and the server use.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union

__all__ = ["Tokenizer"]

_CONTENT_FORMATS = ("auto", "string", "openai")


def normalize_messages(messages: Any, content_format: str = "auto", where: str = "messages") -> list[dict[str, Any]]:
    """A conversation as templates expect it: each message a dict with a string role; content parts of type text
    joined with newlines into one string (content format "string", also what "auto" means here), or kept as the
    list (content format "openai")."""
    if content_format not in _CONTENT_FORMATS:
        raise ValueError(f"chat_template_content_format must be one of {', '.join(_CONTENT_FORMATS)}, got "
                         f"{content_format!r}")
    if not isinstance(messages, (list, tuple)):
        raise TypeError(f"{where} must be a list of messages, got {type(messages).__name__}")
    if not messages:
        raise ValueError(f"{where}: at least one message is required")
    out = []
    for i, m in enumerate(messages):
        name = f"{where}[{i}]"
        if not isinstance(m, dict):
            raise TypeError(f"{name}: each message must be a dict, got {type(m).__name__}")
        if not isinstance(m.get("role"), str):
            raise ValueError(f"{name}.role: a string role is required")
        msg = dict(m)
        content = m.get("content")
        if isinstance(content, (list, tuple)) and content_format != "openai":
            texts = []
            for j, part in enumerate(content):
                pname = f"{name}.content[{j}]"
                if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                    raise ValueError(f"{pname}: each content part must be a dict with a string type")
                if part["type"] != "text":
                    raise ValueError(f"{pname}.type: content type '{part['type']}' is not supported (text only)")
                if not isinstance(part.get("text"), str):
                    raise ValueError(f"{pname}.text: a string text is required")
                texts.append(part["text"])
            msg["content"] = "\n".join(texts)
        elif content is not None and not isinstance(content, (str, list, tuple)):
            raise TypeError(f"{name}.content: expected a string, a list of content parts or None")
        out.append(msg)
    return out


class Tokenizer:
    """Hugging Face-style tokenizer of an LLM: encode, decode, apply_chat_template, eos_token_id, vocab_size."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        info = engine.info
        self.vocab_size: int = info["vocab_size"]
        self._eos_token_ids: list[int] = list(info["eos_token_ids"])

    @property
    def eos_token_id(self) -> Optional[int]:
        return self._eos_token_ids[0] if self._eos_token_ids else None

    def __len__(self) -> int:
        return self.vocab_size

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        if not isinstance(text, str):
            raise TypeError(f"encode: text must be a string, got {type(text).__name__}")
        return self._engine.tokenize(text, add_special_tokens)

    def __call__(self, text: Union[str, Sequence[str]], add_special_tokens: bool = True) -> dict[str, Any]:
        if isinstance(text, str):
            ids = self.encode(text, add_special_tokens)
            return {"input_ids": ids, "attention_mask": [1] * len(ids)}
        batch = self._engine.tokenize_batch(list(text), add_special_tokens)
        return {"input_ids": batch, "attention_mask": [[1] * len(ids) for ids in batch]}

    def decode(self, token_ids: Union[int, Sequence[int]], skip_special_tokens: bool = False) -> str:
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        return self._engine.detokenize(list(token_ids), skip_special_tokens)

    def batch_decode(self, sequences: Sequence[Sequence[int]], skip_special_tokens: bool = False) -> list[str]:
        return [self.decode(s, skip_special_tokens) for s in sequences]

    def convert_ids_to_tokens(self, ids: Union[int, Sequence[int]]) -> Union[str, list[str]]:
        """Each id decoded alone (special tokens included)."""
        if isinstance(ids, int):
            return self._engine.token_text(ids)
        return [self._engine.token_text(i) for i in ids]

    def apply_chat_template(self, conversation: Any, tools: Optional[list[dict[str, Any]]] = None, *,
                            add_generation_prompt: bool = False, continue_final_message: bool = False,
                            tokenize: bool = True, chat_template: Optional[str] = None,
                            **kwargs: Any) -> Union[str, list[int]]:
        """Renders a conversation as transformers does (same defaults: no generation prompt, token ids unless
        tokenize=False); extra keyword arguments become template variables."""
        text = self._engine.apply_chat_template(normalize_messages(conversation, where="conversation"),
                                                add_generation_prompt, continue_final_message, tools,
                                                kwargs or None, chat_template)
        if not tokenize:
            return text
        return self._engine.tokenize(text, False)
