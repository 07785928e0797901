"""A built token corpus (``hlnas corpus build``): one folder, read without its text, its tokenizer or the network.

* ``manifest.json``: the corpus's name, its sources with their licences and archive digests, the tokenizer's
  digest, the split rule, the size of each split, and every document as ``[id, source, split, start, length]``;
* ``tokens.bin``: every document's token ids back to back (no separators: the packer appends the tokenizer's
  ``eos_id``), little-endian ``uint16`` (``uint32`` above 65,536 ids);
* ``tokenizer.json``: the BPE vocabulary the tokens are ids of (:class:`hlnas.data.tokenizer.BPETokenizer`);
* ``licences/``: the licence files of its sources, copied as they were.

Splits are by document (``train``, ``val``, ``test``): a document's tokens are in one split only. Training reads
``train`` in an order the data seed picks, reshuffled every pass; validation reads ``val``; ``test`` is held apart
for a final measurement, never read by a search.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterator
from pathlib import Path

from hlnas.errors import DataSourceError

__all__ = ["TokenCorpus", "is_token_corpus", "SPLITS", "MANIFEST", "TOKENS", "FORMAT", "data_record"]

MANIFEST = "manifest.json"
TOKENS = "tokens.bin"
FORMAT = "hlnas-token-corpus/1"
SPLITS = ("train", "val", "test")
_DTYPES = {"uint16": 2, "uint32": 4}


def is_token_corpus(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a folder built by ``hlnas corpus build`` (it holds a manifest and a token file)."""
    p = Path(path)
    return p.is_dir() and (p / MANIFEST).is_file() and (p / TOKENS).is_file()


class TokenCorpus:
    """A built corpus, its tokens mapped from disk. Documents come back as lists of token ids."""

    def __init__(self, path: str | os.PathLike):
        import numpy as np

        self.path = Path(path)
        if not is_token_corpus(self.path):
            raise DataSourceError(f"'{path}' is not a built token corpus (a folder with {MANIFEST} and {TOKENS}); "
                                  "build one with: hlnas corpus build english --fetch")
        try:
            self.manifest = json.loads((self.path / MANIFEST).read_text())
        except json.JSONDecodeError as e:
            raise DataSourceError(f"{self.path / MANIFEST} is not valid JSON ({e.msg}); rebuild the corpus") from None
        m = self.manifest
        if m.get("format") != FORMAT:
            raise DataSourceError(f"{self.path / MANIFEST} has format {m.get('format')!r}; this hlnas reads {FORMAT!r}: "
                                  "rebuild the corpus with hlnas corpus build")
        size = (self.path / TOKENS).stat().st_size
        if m["dtype"] not in _DTYPES or size != m["n_tokens"] * _DTYPES[m["dtype"]]:
            raise DataSourceError(f"{self.path / TOKENS} holds {size:,} bytes, not the {m['n_tokens']:,} {m['dtype']} "
                                  "tokens its manifest names: the copy is incomplete; copy or rebuild it again")
        self.tokens = np.memmap(self.path / TOKENS, dtype=np.dtype(m["dtype"]).newbyteorder("<"), mode="r")
        self._spans: dict[str, list[tuple[int, int]]] = {s: [] for s in SPLITS}
        for _id, _src, split, start, length in m["documents"]:
            self._spans[split].append((start, length))

    @property
    def name(self) -> str:
        return self.manifest["name"]

    @property
    def tokenizer_path(self) -> Path:
        return self.path / self.manifest["tokenizer"]["file"]

    @property
    def tokenizer_sha256(self) -> str:
        return self.manifest["tokenizer"]["sha256"]

    @property
    def vocab_size(self) -> int:
        return self.manifest["tokenizer"]["vocab_size"]

    def n_documents(self, split: str) -> int:
        return len(self._spans[self._split(split)])

    def n_tokens(self, split: str) -> int:
        return sum(n for _, n in self._spans[self._split(split)])

    def _split(self, split: str) -> str:
        if split not in SPLITS:
            raise DataSourceError(f"split '{split}' is not allowed; allowed: {', '.join(SPLITS)}")
        return split

    def _doc(self, span: tuple[int, int]) -> list[int]:
        start, length = span
        return self.tokens[start:start + length].tolist()

    def documents(self, split: str) -> list[list[int]]:
        """Every document of ``split`` in the corpus's order."""
        return [self._doc(s) for s in self._spans[self._split(split)]]

    def train_documents(self, seed: int) -> Iterator[list[int]]:
        """The training documents, pass after pass without end, each pass in its own order drawn from ``seed``
        (the data seed): two seeds see the same documents in different orders, so their batches differ."""
        spans = self._spans["train"]
        if not spans:
            raise DataSourceError(f"corpus '{self.path}' has no training documents; rebuild it with smaller "
                                  "--val-frac/--test-frac or more text")
        epoch = 0
        while True:
            order = list(range(len(spans)))
            random.Random(f"hlnas.corpus:{seed}:{epoch}").shuffle(order)
            for i in order:
                yield self._doc(spans[i])
            epoch += 1


def data_record(source: str, tokenizer) -> dict:
    """What a trial records of its data beside the data settings: the tokenizer's name and vocabulary and, for a built
    corpus, its name and the digest of its token file (so a result says which text it was measured on)."""
    out = {"data_tokenizer": getattr(tokenizer, "name", type(tokenizer).__name__),
           "data_vocab_size": getattr(tokenizer, "vocab_size", None)}
    if source not in ("synthetic",) and not source.startswith("hf:") and is_token_corpus(source):
        m = json.loads((Path(source) / MANIFEST).read_text())
        out.update(data_corpus=m["name"], data_corpus_sha256=m["tokens_sha256"][:16])
    return out
