"""Packing documents into fixed-length training and validation rows.

Documents are tokenized, each followed by the tokenizer's ``eos_id``, concatenated into one flat
token stream and cut into rows of ``seq_len + 1`` tokens: a row gives inputs ``row[:-1]`` and
targets ``row[1:]``, both ``seq_len`` long. No padding; a document may span two rows.

Split: the first ``cfg.val_docs`` documents of the source are validation, every later document is
training, so the two never share a document; a built corpus (:mod:`hlnas.data.token_corpus`) brings its own split,
by document. Finite sources are repeated (epochs) for training; a built corpus's passes each take their own order,
drawn from the data seed (``cfg.seed``).

Order: training batch ``i`` is a pure function of ``(cfg, seq_len, batch_size, i)`` (and the extra
documents, when mixed in), so ``train_batches(b, start_step=i)`` yields the same tensors as
skipping ``i`` batches; resuming from a checkpoint only needs the step. Skipping counts tokens
instead of building them (for the byte tokenizer it never tokenizes skipped documents).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterable, Iterator

import torch

from hlnas.errors import ConfigError

from .corpus import synthetic_documents
from .sources import DataConfig, DataSourceError, iter_documents
from .token_corpus import TokenCorpus, is_token_corpus
from .tokenizer import ByteTokenizer, Tokenizer, load_tokenizer

__all__ = ["TokenStream", "tokens_per_batch"]


def tokens_per_batch(batch_size: int, seq_len: int) -> int:
    """Target tokens one batch trains on: ``batch_size * seq_len`` (a row holds seq_len + 1 tokens)."""
    return batch_size * seq_len


class TokenStream:
    """Training and validation batches of token ids, ``LongTensor [batch, seq_len + 1]``.

    ``extra_docs``: optional ``seed -> iterable of documents`` (e.g. recall-format documents); when
    given, ``extra_count`` extra documents are inserted after every ``extra_every`` source documents of
    the training stream (validation is never mixed). A document is a str, or a list of token ids taken as they are
    (synthetic token-level tasks such as MQAR), where :func:`not_a_target` marks tokens that are input
    only (train batches keep the marks until :func:`split_targets`). It must yield the same documents for the same seed; it
    is called again with the same seed if it runs out. ``tokenizer``: ``cfg.tokenizer`` when the caller has it
    loaded already (a run loads it once for training and scoring); else it is loaded here.
    """

    def __init__(self, cfg: DataConfig, seq_len: int, *,
                 extra_docs: Callable[[int], Iterable[str | list[int]]] | None = None, extra_every: int = 0,
                 extra_count: int = 1, tokenizer: Tokenizer | None = None):
        if seq_len < 1:
            raise ConfigError(f"seq_len must be >= 1, got {seq_len}")
        if extra_docs is not None and extra_every < 1:
            raise ConfigError(f"extra_every must be >= 1 when extra_docs is given, got {extra_every}")
        if extra_count < 1:
            raise ConfigError(f"extra_count must be >= 1, got {extra_count}")
        self.cfg = cfg
        self.seq_len = seq_len
        self.row_len = seq_len + 1
        self.tokenizer: Tokenizer = tokenizer if tokenizer is not None else load_tokenizer(cfg.tokenizer)
        self.extra_docs = extra_docs
        self.extra_every = extra_every
        self.extra_count = extra_count
        self._val_rows: list[list[int]] | None = None
        self.corpus: TokenCorpus | None = None
        if cfg.source not in ("synthetic",) and not cfg.source.startswith("hf:") and is_token_corpus(cfg.source):
            self.corpus = TokenCorpus(cfg.source)
            if getattr(self.tokenizer, "sha256", None) != self.corpus.tokenizer_sha256:
                raise DataSourceError(
                    f"data source '{cfg.source}' holds the ids of its own tokenizer ({self.corpus.vocab_size} ids); "
                    f"data.tokenizer={cfg.tokenizer!r} is another: set data.tokenizer to '{cfg.source}'")
        elif not cfg.source.startswith("hf:"):  # fail now on a bad path or column (a hub dataset loads lazily)
            iter_documents(cfg)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    @property
    def eos_id(self) -> int:
        return self.tokenizer.eos_id

    def tokens_per_batch(self, batch_size: int) -> int:
        return tokens_per_batch(batch_size, self.seq_len)

    # ----- documents
    def val_documents(self) -> list[str | list[int]]:
        """The held-out documents: the first ``cfg.val_docs`` of the source (fewer if it is shorter), or a built
        corpus's validation split."""
        if self.corpus is not None:
            return self.corpus.documents("val")
        return list(itertools.islice(iter_documents(self.cfg), self.cfg.val_docs))

    def train_documents(self) -> Iterator[str]:
        """The infinite training document stream: source documents after the validation ones, repeated
        pass after pass for finite sources, with extra documents mixed in when configured."""
        docs = self._source_train_documents()
        if self.extra_docs is None:
            return docs
        return self._mix(docs)

    def _source_train_documents(self) -> Iterator[str]:
        cfg = self.cfg
        if cfg.source == "synthetic":  # random access: no need to generate the validation documents
            yield from synthetic_documents(cfg.seed, start=cfg.val_docs)
            return
        if self.corpus is not None:
            yield from self.corpus.train_documents(cfg.seed)
            return
        for epoch in itertools.count():
            n = 0
            for doc in itertools.islice(iter_documents(cfg), cfg.val_docs, None):
                n += 1
                yield doc
            if n == 0:
                raise DataSourceError(
                    f"data source '{cfg.source}' has no training documents: all of its documents are held out "
                    f"for validation (val_docs={cfg.val_docs}); lower val_docs or add data")

    def _mix(self, docs: Iterator[str]) -> Iterator[str]:
        extra = iter(self.extra_docs(self.cfg.seed))
        for i, doc in enumerate(docs, 1):
            yield doc
            if i % self.extra_every:
                continue
            for _ in range(self.extra_count):
                nxt = next(extra, None)
                if nxt is None:  # ran out: start another pass with the same seed
                    extra = iter(self.extra_docs(self.cfg.seed))
                    nxt = next(extra, None)
                    if nxt is None:
                        raise DataSourceError("extra_docs yielded no documents; give a generator that yields at least one")
                yield nxt

    # ----- tokens and rows
    def _n_tokens(self, doc: str | list[int]) -> int:
        if isinstance(doc, list):
            return len(doc)
        if isinstance(self.tokenizer, ByteTokenizer):  # same count as encode(), without building the list
            return len(doc.encode("utf-8"))
        return len(self.tokenizer.encode(doc))

    def _token_chunks(self, docs: Iterable[str | list[int]], skip_tokens: int = 0) -> Iterator[list[int]]:
        """Each document's tokens plus eos, with the first ``skip_tokens`` of the flat stream dropped."""
        eos = self.tokenizer.eos_id

        def encode(doc):  # a token-id list is already tokens (copied: eos is appended to it)
            return list(doc) if isinstance(doc, list) else self.tokenizer.encode(doc)
        for doc in docs:
            if skip_tokens:
                n = self._n_tokens(doc) + 1
                if n <= skip_tokens:
                    skip_tokens -= n
                    continue
                toks = encode(doc)
                toks.append(eos)
                yield toks[skip_tokens:]
                skip_tokens = 0
                continue
            toks = encode(doc)
            toks.append(eos)
            yield toks

    def _rows(self, chunks: Iterable[list[int]]) -> Iterator[list[int]]:
        """Consecutive ``row_len`` slices of the concatenated chunks; a trailing partial row is dropped."""
        L, buf = self.row_len, []
        for toks in chunks:
            buf.extend(toks)
            if len(buf) >= L:
                n = len(buf) // L
                for k in range(n):
                    yield buf[k * L:(k + 1) * L]
                buf = buf[n * L:]

    def _shuffled(self, rows: Iterator[list[int]], first_block: int) -> Iterator[list[int]]:
        # Blocks are shuffled independently (own RNG per block), so block b is the same wherever we start.
        size = self.cfg.shuffle_rows
        for b in itertools.count(first_block):
            block = list(itertools.islice(rows, size))
            if not block:
                return
            random.Random(f"hlnas.shuffle:{self.cfg.seed}:{b}").shuffle(block)
            yield from block

    # ----- batches
    def train_batches(self, batch_size: int, start_step: int = 0) -> Iterator[torch.Tensor]:
        """Infinite training batches ``LongTensor [batch_size, seq_len + 1]``, from batch ``start_step`` on.

        Batch ``i`` is rows ``[i * batch_size, (i + 1) * batch_size)`` of the training row stream.
        """
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        if start_step < 0:
            raise ConfigError(f"start_step must be >= 0, got {start_step}")
        first_row = start_step * batch_size
        size = self.cfg.shuffle_rows
        first_block = first_row // size if size else 0
        skip_rows = first_block * size if size else first_row
        rows = self._rows(self._token_chunks(self.train_documents(), skip_rows * self.row_len))
        if size:
            rows = itertools.islice(self._shuffled(rows, first_block), first_row - skip_rows, None)
        while True:
            batch = list(itertools.islice(rows, batch_size))
            if len(batch) < batch_size:  # only if a source ends, which the epoch loop prevents
                return
            yield torch.tensor(batch, dtype=torch.long)

    def val_rows(self) -> list[list[int]]:
        """All full validation rows, in source order (computed once)."""
        if self._val_rows is None:
            self._val_rows = list(self._rows(self._token_chunks(self.val_documents())))
        return self._val_rows

    def val_batches(self, batch_size: int, max_batches: int | None = None) -> list[torch.Tensor]:
        """Fixed validation batches ``LongTensor [batch_size, seq_len + 1]``: the first full batches of the
        validation rows, at most ``max_batches`` (None = all). The same list every call.

        When validation holds fewer rows than one batch, the one batch holds all of them (a smaller
        batch, rather than failing at the end of a training run); with no full row at all it raises.
        """
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        if max_batches is not None and max_batches < 1:
            raise ConfigError(f"max_batches must be >= 1 or None, got {max_batches}")
        rows = self.val_rows()
        if not rows:
            raise ConfigError(
                f"validation holds no full row of {self.row_len} tokens (val_docs={self.cfg.val_docs}); "
                "raise val_docs or lower seq_len")
        n = max(1, len(rows) // batch_size)
        if max_batches is not None:
            n = min(n, max_batches)
        return [torch.tensor(rows[i * batch_size:(i + 1) * batch_size], dtype=torch.long) for i in range(n)]
