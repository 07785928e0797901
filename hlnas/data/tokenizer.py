"""Tokenizers: a byte-level default (no download) and any local Hugging Face tokenizer directory.

Interface used everywhere in hlnas: ``encode(text) -> list[int]``, ``decode(ids) -> str``,
``vocab_size``, ``eos_id`` (document separator), ``name``.
"""

from __future__ import annotations

import os
from typing import Protocol, runtime_checkable

from hlnas.errors import ConfigError

__all__ = ["Tokenizer", "ByteTokenizer", "HFTokenizer", "load_tokenizer"]


@runtime_checkable
class Tokenizer(Protocol):
    name: str
    vocab_size: int
    eos_id: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


class ByteTokenizer:
    """UTF-8 bytes as tokens (vocab 256). Byte 0 (NUL, absent from text) separates documents."""

    name = "bytes"
    vocab_size = 256
    eos_id = 0

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(int(i) for i in ids if 0 < int(i) < 256).decode("utf-8", errors="replace")


class HFTokenizer:
    """A tokenizer saved with ``save_pretrained`` in a local directory (never downloaded)."""

    def __init__(self, path: str):
        if not os.path.isdir(path):
            raise ConfigError(f"tokenizer directory '{path}' does not exist; give 'bytes' or a local Hugging Face tokenizer directory")
        from transformers import AutoTokenizer

        self._tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.name = os.path.abspath(path)
        self.vocab_size = len(self._tok)
        eos = self._tok.eos_token_id
        self.eos_id = int(eos if eos is not None else (self._tok.pad_token_id or 0))

    def encode(self, text: str) -> list[int]:
        return list(self._tok(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=True)


def load_tokenizer(spec: str = "bytes") -> Tokenizer:
    """'bytes' -> ByteTokenizer; a directory path -> HFTokenizer."""
    if spec in ("bytes", "byte", None, ""):
        return ByteTokenizer()
    return HFTokenizer(spec)
