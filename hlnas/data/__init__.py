"""Training and evaluation data: tokenizers, text sources, packing into fixed-length sequences.

Names are re-exported lazily, so ``import hlnas.data.tokenizer`` (or ``.sources``) does not import torch.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "DataConfig": "sources", "DataSourceError": "sources", "iter_documents": "sources",
    "TokenStream": "packing", "tokens_per_batch": "packing",
    "synthetic_documents": "corpus", "synthetic_document": "corpus",
    "Tokenizer": "tokenizer", "ByteTokenizer": "tokenizer", "BPETokenizer": "tokenizer", "load_tokenizer": "tokenizer",
    "TokenCorpus": "token_corpus", "is_token_corpus": "token_corpus", "CorpusSpec": "corpus_build",
    "build_corpus": "corpus_build",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
