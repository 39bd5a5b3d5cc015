"""Prompt tokens, counted as vLLM counts them, with the model's real tokenizer."""

from __future__ import annotations

from functools import cache

import quicktok

from contract.spec import ModelInfo


@cache
def _encoding(name: str) -> quicktok.Tokenizer:
    return quicktok.get_encoding(name)


def encode(model: ModelInfo, text: str, add_special_tokens: bool = True) -> list[int]:
    """Token ids of `text`; special tokens written in the text count as one token,
    as in Hugging Face tokenizers, and BOS comes first when special tokens are added."""
    ids = _encoding(model.tokenizer_encoding).encode_with_special_tokens(text)
    return [model.bos_token_id, *ids] if add_special_tokens else ids


def decode(model: ModelInfo, ids: list[int]) -> str:
    return _encoding(model.tokenizer_encoding).decode(ids)


def token_bytes(model: ModelInfo, token_id: int) -> bytes:
    return _encoding(model.tokenizer_encoding).decode_single_token_bytes(token_id)
