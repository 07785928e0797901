"""Multi-query associative recall (MQAR), Zoology's synthetic recall task, as a fast recall proxy.

Construction (HazyResearch/zoology @ d88d6f5, ``zoology/data/multiquery_ar.py``; reference/ruler-mqar.md
section 2): an example of length L holds ``k1 v1 k2 v2 ... kK vK`` at positions 0..2K-1, keys drawn
distinct from [1, V/2) and values distinct from [V/2, V). Each key is queried once in the region after
them, at position 2K + 2g with a distinct gap g in [0, (L - 2K)/2) drawn with P(g) ~ a (g+1)^(a-1)
(a = ``power_a``; most queries fall early). Labels are -100 except at query positions, which hold the
key's value (next-token prediction). Other positions hold 0, or uniform tokens in [0, V) with
``random_non_queries``.

Overwritten keys (``overwrite``, a fraction f of the pairs; not in Zoology): after the K pairs, R = floor(f K) of the
keys are assigned again, each to a new value (``k v ... k' v'``), and a query asks for the latest value. The delta
rule replaces a key's value as it writes; a decaying sum keeps both, the later weighted more. The queries follow the
re-assignments, in the slots left after them.

Seeds: as in Zoology, training data uses seeds in [0, 2**31) and test data ``2**31 + seed``, so the two
never share a generator stream. Sampling uses a ``torch.Generator`` (not NumPy's global state); the
distribution is Zoology's, the exact examples are not.

Small vocabularies: ``vocab_size`` may be anything from 4 up to the model's vocabulary (e.g. 256 for a
byte-level model; Zoology's ``V > L`` assertion is not needed and not enforced), and ``token_map`` sends
MQAR symbol i to model token ``token_map[i]`` (e.g. to keep the filler off the model's EOS id).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hlnas.training.targets import not_a_target
from hlnas.errors import ConfigError
from hlnas.training.loop import evaluating, model_device

__all__ = ["MqarTask", "make_mqar", "mqar_accuracy", "label_hits", "hits_accuracy", "mqar_loss", "mqar_documents", "mqar_token_map", "as_documents", "TEST_SEED_OFFSET"]

TEST_SEED_OFFSET = 2**31
IGNORE = -100


@dataclass(frozen=True, kw_only=True)
class MqarTask:
    vocab_size: int = 8192  # MQAR symbols: 0 filler, [1, V/2) keys, [V/2, V) values
    seq_len: int  # L, even
    num_kv_pairs: int  # K, with 4K <= L
    power_a: float = 0.01  # gap distribution exponent (Zoology's default)
    random_non_queries: bool = False  # the paper sweep's zero fillers
    overwrite: float = 0.0  # fraction of the K keys assigned again, to new values, before the queries
    token_map: tuple[int, ...] | None = None  # symbol -> model token id; None = identity

    def __post_init__(self) -> None:
        V, L, K = self.vocab_size, self.seq_len, self.num_kv_pairs
        if L < 4 or L % 2:
            raise ConfigError(f"MqarTask.seq_len must be even and >= 4, got {L}")
        if K < 1 or 4 * K > L:
            raise ConfigError(f"MqarTask.num_kv_pairs must satisfy 1 <= K and 4K <= seq_len={L}, got K={K}")
        if V < 4 or K > V // 2 - 1:
            raise ConfigError(f"MqarTask.vocab_size={V} holds {max(V // 2 - 1, 0)} distinct keys; num_kv_pairs={K} needs vocab_size >= {2 * K + 2}")
        if not (isinstance(self.overwrite, (int, float)) and 0 <= self.overwrite < 1):
            raise ConfigError(f"MqarTask.overwrite must be a fraction in [0, 1) of the pairs assigned again, got {self.overwrite!r}")
        R = self.overwritten
        if 4 * K + 2 * R > L:
            raise ConfigError(f"MqarTask with num_kv_pairs={K} and overwrite={self.overwrite} ({R} keys assigned again) "
                              f"needs seq_len >= 4K + 2R = {4 * K + 2 * R}, got {L}")
        if K + R > V - V // 2:
            raise ConfigError(f"MqarTask.vocab_size={V} holds {V - V // 2} distinct values; {K} pairs and {R} "
                              f"re-assignments need {K + R}")
        if not self.power_a > 0:
            raise ConfigError(f"MqarTask.power_a must be > 0, got {self.power_a}")
        if self.token_map is not None:
            m = tuple(int(t) for t in self.token_map)
            if len(m) != V or len(set(m)) != V or min(m) < 0:
                raise ConfigError(f"MqarTask.token_map must hold vocab_size={V} distinct non-negative token ids, got {len(m)} ids ({len(set(m))} distinct)")
            object.__setattr__(self, "token_map", m)

    @property
    def overwritten(self) -> int:
        """R: how many of the keys are assigned a second value before the queries."""
        return int(self.overwrite * self.num_kv_pairs)

    @property
    def model_vocab_needed(self) -> int:
        """Smallest model vocabulary that holds every token id this config emits."""
        return self.vocab_size if self.token_map is None else max(self.token_map) + 1

    def replace(self, **changes) -> "MqarTask":
        return dataclasses.replace(self, **changes)


def make_mqar(cfg: MqarTask, n: int, seed: int, *, split: str = "test") -> tuple[Tensor, Tensor]:
    """``n`` MQAR examples: ``(inputs, labels)``, both LongTensor ``[n, seq_len]``.

    ``seed`` in [0, 2**31); ``split="train"`` draws from stream ``seed``, ``split="test"`` from ``2**31 + seed``.
    """
    if split not in ("train", "test"):
        raise ConfigError(f"split must be 'train' or 'test', got {split!r}")
    if not 0 <= seed < TEST_SEED_OFFSET:
        raise ConfigError(f"MQAR seed must lie in [0, 2**31), got {seed}; test data adds 2**31 itself")
    if n < 1:
        raise ConfigError(f"n must be >= 1, got {n}")
    g = torch.Generator().manual_seed(seed + (TEST_SEED_OFFSET if split == "test" else 0))
    # chunks bound the [rows, V/2] uniform draws (100k x 4k floats would be 1.6 GB); same chunks, same data
    parts = [_chunk(cfg, min(_CHUNK, n - s), g) for s in range(0, n, _CHUNK)]
    inputs, labels = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
    if cfg.token_map is not None:
        table = torch.tensor(cfg.token_map, dtype=torch.long)
        inputs = table[inputs]
        labels = torch.where(labels == IGNORE, labels, table[labels.clamp_min(0)])
    return inputs, labels


_CHUNK = 1024


def mqar_token_map(vocab_size: int, model_vocab: int, eos_id: int) -> tuple[int, ...]:
    """Symbol -> token id for MQAR inside a language model's vocabulary: the first ``vocab_size`` ids,
    skipping ``eos_id`` (the document separator must keep its meaning)."""
    ids = [t for t in range(model_vocab) if t != eos_id][:vocab_size]
    if len(ids) < vocab_size:
        raise ConfigError(f"an MQAR vocabulary of {vocab_size} symbols needs a model vocabulary of at least {vocab_size + 1} (one id is eos), got {model_vocab}")
    return tuple(ids)


def as_documents(inputs: Tensor, labels: Tensor) -> Tensor:
    """MQAR examples in language-model form: each query key is followed by its value (in Zoology's form
    the next input is filler and the value is only a label), so plain next-token training teaches the
    lookup. Labels keep their places, so :func:`mqar_accuracy` scores the same queries; a value after
    query ``i`` helps no later query (each key is asked once)."""
    docs = inputs.clone()
    q = labels != IGNORE
    shifted = torch.zeros_like(q)
    shifted[:, 1:] = q[:, :-1]  # the position after each query (odd, never another query)
    docs[shifted] = labels[q]
    return docs


def mqar_documents(cfg: MqarTask, seed: int) -> Iterator[list[int]]:
    """Endless MQAR training instances as token-id lists in language-model form (:func:`as_documents`,
    ``cfg.token_map`` applied), for mixing into training: the recall protocol's MQAR format. Only the
    answers (the value after each query) are training targets; every other token is marked input-only
    (:func:`~hlnas.training.targets.not_a_target`), as Zoology trains on query positions only. Drawn from the
    train stream, so never one of :func:`make_mqar`'s test instances; block ``b`` uses train seed ``seed + b``."""
    for block in itertools.count():
        inputs, labels = make_mqar(cfg, _CHUNK, (seed + block) % TEST_SEED_OFFSET, split="train")
        docs = as_documents(inputs, labels)
        answer = torch.zeros_like(labels, dtype=torch.bool)
        answer[:, 1:] = labels[:, :-1] != IGNORE
        yield from torch.where(answer, docs, not_a_target(docs)).tolist()


def _chunk(cfg: MqarTask, n: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
    V, L, K, a, R = cfg.vocab_size, cfg.seq_len, cfg.num_kv_pairs, cfg.power_a, cfg.overwritten
    half = V // 2
    # top-k of i.i.d. uniforms = K distinct picks in random order (the first K of the top K + R are the same picks,
    # so overwrite=0 draws exactly the instances it always did)
    keys = torch.rand(n, half - 1, generator=g).topk(K, dim=1).indices + 1
    values = torch.rand(n, V - half, generator=g).topk(K + R, dim=1).indices + half
    start = 2 * (K + R)  # the queries' region
    slots = (L - start) // 2
    weight = a * torch.arange(1, slots + 1, dtype=torch.float64) ** (a - 1)
    # weighted sampling without replacement (Efraimidis-Spirakis): top-K of log(u)/w, in draw order
    u = torch.rand(n, slots, generator=g, dtype=torch.float64).clamp_min(1e-300)
    gaps = (u.log() / weight).topk(K, dim=1).indices
    inputs = torch.zeros(n, L, dtype=torch.long)
    inputs[:, 0 : 2 * K : 2] = keys
    inputs[:, 1 : 2 * K : 2] = values[:, :K]
    latest = values[:, :K].clone()
    if R:  # keys are in random order, so the first R are a random subset: assigned again, in that order
        inputs[:, 2 * K : start : 2] = keys[:, :R]
        inputs[:, 2 * K + 1 : start : 2] = values[:, K:]
        latest[:, :R] = values[:, K:]
    qpos = start + 2 * gaps
    inputs.scatter_(1, qpos, keys)
    labels = torch.full((n, L), IGNORE, dtype=torch.long)
    labels.scatter_(1, qpos, latest)
    if cfg.random_non_queries:
        filler = inputs == 0
        inputs[filler] = torch.randint(V, (int(filler.sum()),), generator=g)
    return inputs, labels


def mqar_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Zoology's loss: cross-entropy over all positions with ignore_index -100 (only queries count)."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1), ignore_index=IGNORE)


@torch.no_grad()
def label_hits(model: nn.Module, inputs: Tensor, labels: Tensor, batch_size: int = 64, device=None) -> Tensor:
    """``[n, L]`` bool on the CPU: where ``argmax(model(inputs)) == labels`` at a labelled position (False elsewhere).

    ``model(input_ids [B, L]) -> logits [B, L, V]``."""
    if inputs.shape != labels.shape or inputs.dim() != 2:
        raise ConfigError(f"inputs and labels must both be [n, L], got {tuple(inputs.shape)} and {tuple(labels.shape)}")
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    device = model_device(model) if device is None else device
    hits = []
    with evaluating(model):
        for s in range(0, inputs.shape[0], batch_size):
            x, y = inputs[s : s + batch_size].to(device), labels[s : s + batch_size].to(device)
            logits = model(x)
            if logits.shape[-1] <= int(y.max()):
                raise ConfigError(f"label token {int(y.max())} is outside the model's vocabulary of {logits.shape[-1]}; lower MqarTask.vocab_size or map tokens")
            hits.append(((logits.argmax(-1) == y) & (y != IGNORE)).cpu())
    return torch.cat(hits)


def hits_accuracy(hits: Tensor, labels: Tensor) -> float:
    """Zoology's accuracy of :func:`label_hits`: per example, the mean over its labelled positions; then the mean
    over examples. Examples without labels are left out. ``labels`` may sit on another device than ``hits`` (the
    recall proxy keeps its validation instances on the GPU; :func:`label_hits` returns CPU hits)."""
    mask = labels.to(hits.device) != IGNORE
    has = mask.sum(1) > 0
    if not bool(has.any()):
        raise ConfigError("no labelled positions in labels; nothing to score")
    per = hits.sum(1)[has].double() / mask.sum(1)[has].double()
    return per.sum().item() / int(has.sum())


def mqar_accuracy(model: nn.Module, inputs: Tensor, labels: Tensor, batch_size: int = 64, device=None) -> float:
    """Zoology's accuracy: per example, the mean of (argmax == label) over labelled positions; then the mean.

    ``model(input_ids [B, L]) -> logits [B, L, V]``. Examples without labels are left out.
    """
    return hits_accuracy(label_hits(model, inputs, labels, batch_size, device), labels)
