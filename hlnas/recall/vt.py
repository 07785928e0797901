"""Multi-hop variable tracking (VT), a recall task one attention layer cannot carry, for the fresh-model proxy.

Why: on MQAR one attention layer, once it has learned the lookup, holds any number of pairs, so the attention
share of a hybrid grades only how soon it learns, not whether (HGRN 6:1 took 700 steps to the target and 3:1
2600). VT asks for a chain of lookups: resolving a variable ``h`` hops from its value takes ``h + 1``
lookups one after the other (the query's variable, its source, ..., the value), and a layer does one lookup
per position, so a layout needs as many lookup-capable layers as lookups, in order. Attention does an exact
lookup; a linear mixer's is approximate and its state is shared by every chain.

It is RULER's vt (reference/ruler-mqar.md section 1.4: ``VAR A = 12345``, ``VAR B = VAR A``, ...) without the
text: several chains per sequence, on disjoint token classes, trained from scratch like Zoology's MQAR.

Construction of one example of length ``L`` with ``C`` chains:

* symbols: 0 filler, 1 ``=``, 2 ``?``, variables ``[3, V/2)``, values ``[V/2, V)`` (the values are MQAR's);
* chain ``c`` has ``h_c`` hops (``hops``: a fixed number, or ``[lo, hi]`` drawn uniformly per chain), so
  ``h_c + 1`` distinct variables ``x0 .. x_h`` and one value ``v``; its statements, three tokens each, are
  ``x0 = v``, ``x1 = x0``, ..., ``x_h = x_{h-1}``; every variable and value of an example is distinct;
* the statements of all chains are interleaved uniformly at random, each chain keeping its order, from
  position 0; the statement slots of shorter chains (a hop range) are filler at the end of that region;
* then one query per chain, in random order, two tokens each: ``? x`` with ``x`` the chain's last variable
  (``query="last"``) or a uniformly random one of its variables (``query="any"``); the label at ``x`` is ``v``
  (next-token prediction, Zoology form: the answer is never an input), -100 everywhere else; filler to ``L``.

``hops=0`` is MQAR with an ``=`` between key and value (one lookup): the control at the same length.

Seeds: as :func:`hlnas.recall.mqar.make_mqar`: ``split="train"`` draws from stream ``seed`` in [0, 2**31),
``split="test"`` from ``2**31 + seed``, so the two never share a generator stream.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import Tensor

from hlnas.errors import ConfigError, did_you_mean
from hlnas.overrides import config_to_dict, is_int

__all__ = ["VtTask", "VtConfig", "make_vt", "vt_baselines", "order_leak", "trace_answers", "accuracy_by_hop", "hop_range", "VT_QUERIES", "VT_CURRICULA", "VT_STRATEGIES", "FILLER", "ASSIGN",
           "QUERY", "FIRST_VARIABLE", "TEST_SEED_OFFSET"]

TEST_SEED_OFFSET = 2**31
IGNORE = -100
FILLER, ASSIGN, QUERY, FIRST_VARIABLE = 0, 1, 2, 3
VT_QUERIES = ("last", "any")
VT_CURRICULA = ("shortest", "staged")
#: the no-recall strategies of :func:`vt_baselines`
VT_STRATEGIES = ("uniform", "copy_any", "recent_value")
_CHUNK = 1024
_MAX_HOPS = 64


def hop_range(hops) -> tuple[int, int]:
    """``hops`` (an int, or ``[lo, hi]``) as ``(lo, hi)``; a one-line :class:`ConfigError` naming what is allowed."""
    allowed = f"allowed: an integer from 0 to {_MAX_HOPS}, or a range [lo, hi] with 0 <= lo <= hi <= {_MAX_HOPS}"
    shown = list(hops) if isinstance(hops, tuple) else hops
    if is_int(hops):
        lo = hi = hops
    elif isinstance(hops, (list, tuple)) and len(hops) == 2 and all(is_int(h) for h in hops):
        lo, hi = hops
    else:
        raise ConfigError(f"VT hops={shown!r} is not allowed; {allowed}")
    if not 0 <= lo <= hi <= _MAX_HOPS:
        raise ConfigError(f"VT hops={shown!r} is not allowed; {allowed}")
    return lo, hi


@dataclass(frozen=True, kw_only=True)
class VtTask:
    vocab_size: int = 256  # symbols: 0 filler, 1 '=', 2 '?', [3, V/2) variables, [V/2, V) values
    seq_len: int  # L
    chains: int  # C, each queried once
    hops: int | tuple[int, int] = 2  # per chain: fixed, or [lo, hi] drawn uniformly
    query: str = "last"  # which variable of a chain is asked: its last, or any one

    def __post_init__(self) -> None:
        if isinstance(self.hops, list):
            object.__setattr__(self, "hops", tuple(self.hops))
        lo, hi = hop_range(self.hops)
        V, L, C = self.vocab_size, self.seq_len, self.chains
        if not is_int(C) or C < 1:
            raise ConfigError(f"VT chains={C!r} is not allowed; allowed: an integer >= 1")
        if self.query not in VT_QUERIES:
            raise ConfigError(f"VT query={self.query!r} is not allowed.{did_you_mean(self.query, VT_QUERIES)} "
                              f"Allowed: {', '.join(VT_QUERIES)}")
        if not is_int(V) or V < 8:
            raise ConfigError(f"VT vocab_size={V!r} is not allowed; allowed: an integer >= 8")
        names, values = V // 2 - FIRST_VARIABLE, V - V // 2
        if C * (hi + 1) > names or C > values:
            need = max(2 * (C * (hi + 1) + FIRST_VARIABLE), 2 * C)
            raise ConfigError(f"VT with {C} chains of up to {hi} hops needs {C * (hi + 1)} variable names and {C} values; "
                              f"vocab_size={V} holds {names} and {values}: raise the vocabulary to >= {need} or use fewer "
                              "chains or hops")
        if L < self.min_seq_len:
            raise ConfigError(f"VT with {C} chains of up to {hi} hops needs seq_len >= {self.min_seq_len} (3 tokens a "
                              f"statement, 2 a query), got {L}")

    @property
    def hop_range(self) -> tuple[int, int]:
        return hop_range(self.hops)

    @property
    def min_seq_len(self) -> int:
        return self.chains * (3 * (self.hop_range[1] + 1) + 2)

    @property
    def model_vocab_needed(self) -> int:
        return self.vocab_size

    def replace(self, **changes) -> "VtTask":
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True, kw_only=True)
class VtConfig:
    """``score.mqar.vt``: the variable-tracking task's own settings (:class:`VtTask`), read where ``score.mqar.task``
    is ``vt``; its length and vocabulary are ``score.mqar.seq_len`` and ``score.mqar.vocab``."""

    chains: int = 4  # chains per sequence, each queried once (the no-recall baseline is 1/chains)
    hops: int | tuple[int, ...] = 2  # per chain: a fixed number, or [lo, hi] drawn uniformly (0: MQAR with '=')
    query: str = "last"  # the variable asked of each chain: its last (hops lookups + 1), or any one
    # a curriculum: training batches before this step hold only the range's shortest chains (hops lo), in blocks of
    # 64 steps; validation and test are the whole range. 0: none. (CPU, 8 layers: the control learned 1-lookup
    # queries alone in 1200 steps but stalled at 0.58 with 0-1 hops mixed in from the start)
    curriculum_steps: int = 0
    # shortest: hops lo for curriculum_steps, then the range; staged: hops [lo, lo + k] in stage k, each
    # curriculum_steps long, until the range is whole (CPU, 24 layers: the control learned the 1-lookup queries in the
    # shortest curriculum, then stalled at 0.5 when 1- and 2-hop chains came in together)
    curriculum: str = "shortest"

    def __post_init__(self) -> None:
        if isinstance(self.hops, list):
            object.__setattr__(self, "hops", tuple(self.hops))
        try:
            hop_range(self.hops)
        except ConfigError as e:
            raise ConfigError(f"score.mqar.vt.{str(e).removeprefix('VT ')}") from None
        if not is_int(self.chains) or self.chains < 1:
            raise ConfigError(f"score.mqar.vt.chains={self.chains!r} is not allowed; allowed: an integer >= 1")
        if not is_int(self.curriculum_steps) or self.curriculum_steps < 0:
            raise ConfigError(f"score.mqar.vt.curriculum_steps={self.curriculum_steps!r} is not allowed; allowed: an "
                              "integer >= 0 (0: no curriculum)")
        if self.curriculum not in VT_CURRICULA:
            raise ConfigError(f"score.mqar.vt.curriculum={self.curriculum!r} is not allowed."
                              f"{did_you_mean(str(self.curriculum), VT_CURRICULA)} Allowed: {', '.join(VT_CURRICULA)}")
        if self.query not in VT_QUERIES:
            raise ConfigError(f"score.mqar.vt.query={self.query!r} is not allowed.{did_you_mean(self.query, VT_QUERIES)} "
                              f"Allowed: {', '.join(VT_QUERIES)}")

    def to_dict(self) -> dict:
        return config_to_dict(self)

    def train_task(self, task: "VtTask", step: int) -> "VtTask":
        """The task that training steps from ``step`` draw from under this curriculum (``task``: the whole range)."""
        stage = step // self.curriculum_steps if self.curriculum_steps else None
        if stage is None or (self.curriculum == "shortest" and stage > 0):
            return task
        lo, hi = task.hop_range
        top = lo + stage
        return task if top >= hi else task.replace(hops=(lo, top) if top > lo else lo)


def make_vt(cfg: VtTask, n: int, seed: int, *, split: str = "test") -> tuple[Tensor, Tensor]:
    """``n`` VT examples: ``(inputs, labels)``, both LongTensor ``[n, seq_len]`` (labels -100 except at queries).

    ``seed`` in [0, 2**31); ``split="train"`` draws from stream ``seed``, ``split="test"`` from ``2**31 + seed``."""
    if split not in ("train", "test"):
        raise ConfigError(f"split must be 'train' or 'test', got {split!r}")
    if not is_int(seed) or not 0 <= seed < TEST_SEED_OFFSET:
        raise ConfigError(f"VT seed must lie in [0, 2**31), got {seed}; test data adds 2**31 itself")
    if n < 1:
        raise ConfigError(f"n must be >= 1, got {n}")
    g = torch.Generator().manual_seed(seed + (TEST_SEED_OFFSET if split == "test" else 0))
    parts = [_chunk(cfg, min(_CHUNK, n - s), g) for s in range(0, n, _CHUNK)]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def _chunk(cfg: VtTask, n: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
    V, L, C = cfg.vocab_size, cfg.seq_len, cfg.chains
    lo, hi = cfg.hop_range
    H = hi + 1  # statement slots per chain
    half = V // 2
    rows = torch.arange(n)[:, None]
    hops = torch.randint(lo, hi + 1, (n, C), generator=g)
    # top-k of i.i.d. uniforms: distinct names and values in random order
    names = (torch.rand(n, half - FIRST_VARIABLE, generator=g).topk(C * H, dim=1).indices + FIRST_VARIABLE).view(n, C, H)
    values = torch.rand(n, V - half, generator=g).topk(C, dim=1).indices + half
    # interleave: every real slot (chain c, any j <= hops[c]) gets a uniform key, unused slots sort last; the
    # k-th statement of chain c in key order is its k-th statement, so each chain keeps its order and the
    # sequence of chain labels is a uniformly random interleaving
    real = (torch.arange(H)[None, None, :] <= hops[:, :, None]).view(n, C * H)
    key = torch.rand(n, C * H, generator=g).masked_fill(~real, 2.0)
    order = key.argsort(dim=1)
    chain = order // H  # chain of each statement slot
    used = real.gather(1, order)
    onehot = torch.nn.functional.one_hot(chain, C) * used[..., None]
    step = (onehot.cumsum(1) - onehot).gather(2, chain[..., None]).squeeze(-1)  # statements of the chain before it
    dest = names[rows, chain, step]
    src = torch.where(step == 0, values[rows, chain], names[rows, chain, (step - 1).clamp_min(0)])
    S = C * H
    inputs = torch.zeros(n, L, dtype=torch.long)
    inputs[:, 0 : 3 * S : 3] = torch.where(used, dest, FILLER)
    inputs[:, 1 : 3 * S : 3] = torch.where(used, ASSIGN, FILLER)
    inputs[:, 2 : 3 * S : 3] = torch.where(used, src, FILLER)
    # queries: each chain once, in random order
    qchain = torch.rand(n, C, generator=g).argsort(dim=1)
    qhops = hops.gather(1, qchain)
    if cfg.query == "last":
        qstep = qhops
    else:
        qstep = (torch.rand(n, C, generator=g) * (qhops + 1)).long().clamp_max(qhops)
    qvar = names[rows, qchain, qstep]
    base = 3 * S
    inputs[:, base : base + 2 * C : 2] = QUERY
    inputs[:, base + 1 : base + 2 * C : 2] = qvar
    labels = torch.full((n, L), IGNORE, dtype=torch.long)
    labels[:, base + 1 : base + 2 * C : 2] = values.gather(1, qchain)
    return inputs, labels


def _statements(xs: list[int], end: int) -> list[tuple[int, int, int]]:
    """``(position of the source, destination, source)`` of every statement before ``end``."""
    return [(i + 1, xs[i - 1], xs[i + 1]) for i in range(1, end - 1) if xs[i] == ASSIGN]


def trace_answers(inputs: Tensor, labels: Tensor, vocab_size: int) -> list[list[tuple[int, int | None, int]]]:
    """Per example, per query: ``(label, traced value, hops)``, the traced value found by following the query's
    variable back through the statements before it (None where the chain breaks), and the number of hops taken:
    what a perfect multi-hop lookup answers. For tests and analysis (pure Python, not fast)."""
    half = vocab_size // 2
    out = []
    for xs, ys in zip(inputs.tolist(), labels.tolist()):
        row = []
        for q, y in enumerate(ys):
            if y == IGNORE:
                continue
            source = {d: s for _, d, s in _statements(xs, q)}
            x, hops, seen = xs[q], 0, set()
            while x in source and x not in seen and not half <= x:
                seen.add(x)
                x = source[x]
                hops += 1
            row.append((y, x if half <= x < vocab_size else None, hops - 1))
        out.append(row)
    return out


def vt_baselines(inputs: Tensor, labels: Tensor, vocab_size: int) -> dict[str, float]:
    """Exact scores, on these very instances, of strategies that use no variable-to-value association (each scored
    like Zoology's accuracy: per example the mean over its queries, then the mean over examples):

    * ``uniform``: any value symbol, uniformly: ``1 / (V - V//2)``;
    * ``copy_any``: any value assigned before the query, uniformly (``1/C``);
    * ``recent_value``: the value of the latest ``x = value`` statement before the query.

    Each chain is asked once, so a guess that stays the same for every query of an example scores exactly ``1/C``
    there: no strategy that ignores which variable is asked beats ``1/C`` in expectation. One that changes its guess
    with the query's index (:func:`order_leak`) scores ``1/C`` only in expectation; it is a check of the generator,
    not a baseline (on a few instances its chance excess would inflate the strongest baseline)."""
    return _strategies(inputs, labels, vocab_size, VT_STRATEGIES)


def order_leak(inputs: Tensor, labels: Tensor, vocab_size: int) -> float:
    """The score of answering the i-th query of an example with the i-th value assigned: ``1/C`` in expectation
    when queries come in an order independent of the statements (as :func:`make_vt` draws them); more would
    mean the order leaks answers."""
    return _strategies(inputs, labels, vocab_size, ("nth_value",))["nth_value"]


def _query_scores(inputs: Tensor, labels: Tensor, vocab_size: int, names) -> dict[str, list[list[float]]]:
    """Per strategy, per example, the score of each of its queries (in position order)."""
    if inputs.shape != labels.shape or inputs.dim() != 2:
        raise ValueError(f"inputs and labels must both be [n, L], got {tuple(inputs.shape)} and {tuple(labels.shape)}")
    half = vocab_size // 2
    out: dict[str, list[list[float]]] = {k: [] for k in names}
    for xs, ys in zip(inputs.tolist(), labels.tolist()):
        queries = [q for q, y in enumerate(ys) if y != IGNORE]
        per: dict[str, list[float]] = {k: [] for k in names}
        for i, q in enumerate(queries):
            answer = ys[q]
            given = [s for _, _, s in _statements(xs, q) if half <= s]  # values in assignment order
            distinct = list(dict.fromkeys(given))
            score = {"uniform": lambda: 1.0 / (vocab_size - half),
                     "copy_any": lambda: 1.0 / len(distinct) if answer in distinct else 0.0,
                     "recent_value": lambda: float(bool(given) and given[-1] == answer),
                     "nth_value": lambda: float(i < len(distinct) and distinct[i] == answer)}
            for k in names:
                per[k].append(score[k]())
        for k in names:
            out[k].append(per[k])
    return out


def _strategies(inputs: Tensor, labels: Tensor, vocab_size: int, names) -> dict[str, float]:
    scores = _query_scores(inputs, labels, vocab_size, names)
    totals, count = dict.fromkeys(names, 0.0), 0
    for i in range(inputs.shape[0]):
        if not scores[names[0]][i]:
            continue
        for k in names:
            totals[k] += sum(scores[k][i]) / len(scores[k][i])
        count += 1
    if count == 0:
        raise ValueError("no labelled positions in labels; nothing to score")
    return {k: v / count for k, v in totals.items()}


def accuracy_by_hop(hits: Tensor, inputs: Tensor, labels: Tensor, vocab_size: int) -> dict[str, dict]:
    """Test accuracy split by how many hops each query's variable is from its value (``hops + 1`` lookups), beside
    the no-recall baselines of the same queries: ``{str(hops): {"acc", "n", "baseline", "baseline_name"}}``.

    ``hits``: ``[n, L]`` bool, right answers at labelled positions (:func:`hlnas.recall.mqar.label_hits`). Accuracy
    here is the mean over the queries at that hop count (not Zoology's per-example mean: an example mixes hop
    counts). This is what says whether a layout *chains* lookups: with a hop range, a model that does fewer lookups
    than a query needs can still guess among the values of the longer chains, so compare each hop's accuracy with
    the same hop's accuracy of the all-attention control, not with a total. Each hop has its own baseline: a longer
    chain states its value first, so the latest value statement is a 0-hop chain's more often than ``1/C``
    (``recent_value`` scored 0.46 on 0-hop queries of 4 chains of 0-3 hops, where copy-any is 0.25)."""
    if hits.shape != labels.shape:
        raise ValueError(f"hits must be shaped like labels {tuple(labels.shape)}, got {tuple(hits.shape)}")
    traced = trace_answers(inputs, labels, vocab_size)
    base = _query_scores(inputs, labels, vocab_size, VT_STRATEGIES)
    acc: dict[int, list[float]] = {}
    strat: dict[int, dict[str, float]] = {}
    for i, (row, ys) in enumerate(zip(traced, labels.tolist())):
        queries = [q for q, y in enumerate(ys) if y != IGNORE]
        for j, ((_, _, h), q) in enumerate(zip(row, queries)):
            acc.setdefault(h, []).append(float(hits[i, q]))
            for k in VT_STRATEGIES:
                strat.setdefault(h, dict.fromkeys(VT_STRATEGIES, 0.0))[k] += base[k][i][j]
    out = {}
    for h in sorted(acc):
        n = len(acc[h])
        name = max(VT_STRATEGIES, key=lambda k: strat[h][k])
        out[str(h)] = {"acc": round(sum(acc[h]) / n, 4), "n": n, "baseline": round(strat[h][name] / n, 4),
                       "baseline_name": name}
    return out
