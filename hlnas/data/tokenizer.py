"""Tokenizers: a byte-level default (no download), a BPE vocabulary trained by ``hlnas corpus build`` (a
``tokenizer.json`` of the ``tokenizers`` library, kept beside its token file), and any local Hugging Face
tokenizer directory.

Interface used everywhere in hlnas: ``encode(text) -> list[int]``, ``decode(ids) -> str``,
``vocab_size``, ``eos_id`` (document separator), ``name``.
"""

from __future__ import annotations

import os
from typing import Protocol, runtime_checkable

from hlnas.errors import ConfigError

__all__ = ["Tokenizer", "ByteTokenizer", "BPETokenizer", "HFTokenizer", "load_tokenizer", "EOS_TOKEN", "TOKENIZER_FILE",
           "vocab_mismatch"]

#: the document separator of the BPE vocabularies hlnas trains (id 0)
EOS_TOKEN = "<|endoftext|>"
#: the file a built corpus keeps its tokenizer in
TOKENIZER_FILE = "tokenizer.json"


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


class BPETokenizer:
    """A ``tokenizers`` BPE vocabulary from its ``tokenizer.json`` (``hlnas corpus build`` trains one). ``name`` is
    ``bpe<vocab>:<first 16 hex digits of the file's sha256>``: the same vocabulary has the same name on every machine,
    wherever its file lies; ``sha256`` is the whole digest.

    The size and the separator are read from the JSON itself, and the ``tokenizers`` library is imported only to
    encode or decode: training on a built corpus reads ids that are already there, so a machine without the library
    (a lent GPU) trains on it all the same."""

    def __init__(self, path: str | os.PathLike):
        import hashlib
        import json

        data = open(path, "rb").read()
        try:
            spec = json.loads(data)
            ids = {**spec["model"]["vocab"], **{t["content"]: t["id"] for t in spec.get("added_tokens", [])}}
        except (ValueError, KeyError, TypeError) as e:
            raise ConfigError(f"tokenizer '{path}' is not a tokenizers BPE file ({type(e).__name__}: {e}); build one "
                              "with hlnas corpus build") from None
        self.path = os.fspath(path)
        self.sha256 = hashlib.sha256(data).hexdigest()
        self.vocab_size = max(ids.values()) + 1
        self.name = f"bpe{self.vocab_size}:{self.sha256[:16]}"
        if EOS_TOKEN not in ids:
            raise ConfigError(f"tokenizer '{path}' has no {EOS_TOKEN} token to separate documents; build it with "
                              "hlnas corpus build")
        self.eos_id = int(ids[EOS_TOKEN])
        self._text = data.decode("utf-8")
        self._tok = None

    @property
    def backend(self):
        """The ``tokenizers`` object, loaded on first use."""
        if self._tok is None:
            try:
                from tokenizers import Tokenizer as _Tok
            except ImportError:
                raise ConfigError(f"encoding text with '{self.path}' needs the 'tokenizers' package (pip install "
                                  "tokenizers); training on its built corpus does not") from None
            self._tok = _Tok.from_str(self._text)
        return self._tok

    def encode(self, text: str) -> list[int]:
        return self.backend.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.backend.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: list[int]) -> str:
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=True)


class HFTokenizer:
    """A tokenizer saved with ``save_pretrained`` in a local directory (never downloaded)."""

    def __init__(self, path: str):
        if not os.path.isdir(path):
            raise ConfigError(f"tokenizer '{path}' does not exist; give 'bytes', a corpus folder built by hlnas corpus build "
                              "(or its tokenizer.json), or a local Hugging Face tokenizer directory")
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
    """'bytes' -> ByteTokenizer; a ``tokenizer.json`` file, or a folder holding one with no Hugging Face
    ``tokenizer_config.json`` (a corpus built by ``hlnas corpus build``) -> BPETokenizer; another folder -> HFTokenizer."""
    if spec in ("bytes", "byte", None, ""):
        return ByteTokenizer()
    if os.path.isfile(spec) and spec.endswith(".json"):
        return BPETokenizer(spec)
    inner = os.path.join(spec, TOKENIZER_FILE)
    if os.path.isfile(inner) and not os.path.isfile(os.path.join(spec, "tokenizer_config.json")):
        return BPETokenizer(inner)
    return HFTokenizer(spec)


def vocab_mismatch(spec: str, model_vocab: int, *, strict: bool = True) -> str | None:
    """Why a model of ``model_vocab`` ids cannot read tokenizer ``spec``'s ids (None when it can). ``strict=False``:
    None also when the tokenizer cannot be read here (a stored study's space read on a machine without its corpus)."""
    try:
        tok = load_tokenizer(spec)
    except (ConfigError, OSError):
        if strict:
            raise
        return None
    if tok.vocab_size <= model_vocab:
        return None
    return (f"model.vocab_size={model_vocab} is smaller than tokenizer {spec!r}'s vocabulary ({tok.vocab_size} ids); "
            f"set model.vocab_size: {tok.vocab_size}")
