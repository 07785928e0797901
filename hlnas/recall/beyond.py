"""Recall beyond the training setting, and a key-count curriculum that makes training learn before it is scored.

A recall model trained to a target at its training setting (say MQAR with K=64 pairs in L=256 tokens) saturates there:
every hybrid whose attention layers can do the lookup sits at the stop. Tested at settings it never saw, longer
contexts and more pairs (``score.mqar.beyond``, ``[seq_len, kv_pairs]`` pairs), the same trained models spread: a model
whose linear state holds the pairs keeps its accuracy, one whose attention does the work loses it as the context
outgrows what attention was trained on. :func:`score_beyond` scores each setting on its own test instances, corrects
each for its own strongest no-recall baseline (copy-any: 1/K), and reports their mean as ``mqar_beyond``.

The curriculum (``score.mqar.curriculum_kv``): the run's first batches hold fewer pairs, ``curriculum_kv`` at step 0,
doubling in steps to ``kv_pairs`` by ``curriculum_frac`` of the step budget. The length stays the same, so the step's
tensor shapes (and its CUDA graph and compiled graph) do not change; only which positions hold pairs and queries.
Validation and the stop rule read the target task throughout.
"""

from __future__ import annotations

import math

import torch

from hlnas.errors import ConfigError
from hlnas.metrics import corrected
from hlnas.recall.baselines import mqar_baselines, strongest
from hlnas.recall.mqar import MqarTask, hits_accuracy, label_hits, make_mqar
from hlnas.training.loop import autocast_context, autocast_dtype

__all__ = ["kv_at", "check_beyond", "score_beyond", "setting_key"]


def kv_at(step: int, *, start: int, target: int, steps: int, frac: float) -> int:
    """The pairs a curriculum's batch at ``step`` holds: ``start`` at step 0, doubling at equal intervals to
    ``target`` at ``frac * steps`` and after."""
    if start >= target or frac <= 0:
        return target
    doublings = math.ceil(math.log2(target / start))
    ramp = max(1, int(frac * steps))
    stage = min(doublings, step * doublings // ramp)
    return min(target, start * 2**stage)


def setting_key(seq_len: int, kv_pairs: int) -> str:
    """The name of one beyond-training setting in a result: ``L1024K64``."""
    return f"L{seq_len}K{kv_pairs}"


def check_beyond(settings, vocab: int, train_len: int, overwrite: float = 0.0) -> tuple[tuple[int, int], ...]:
    """``score.mqar.beyond`` as ``((seq_len, kv_pairs), ...)``, each a valid MQAR task in ``vocab`` symbols (with the
    trained task's ``overwrite``), refused in one line otherwise."""
    out = []
    for i, s in enumerate(settings):
        if not (isinstance(s, (list, tuple)) and len(s) == 2 and all(isinstance(v, int) and not isinstance(v, bool)
                                                                     for v in s)):
            raise ConfigError(f"score.mqar.beyond[{i}]={s!r} is not allowed; allowed: [seq_len, kv_pairs] integers, "
                              "e.g. [1024, 64]")
        L, K = s
        try:
            MqarTask(vocab_size=vocab, seq_len=L, num_kv_pairs=K, overwrite=overwrite)
        except ConfigError as e:
            raise ConfigError(f"score.mqar.beyond[{i}]=[{L}, {K}]: {e}") from None
        out.append((L, K))
    if len(set(out)) != len(out):
        raise ConfigError(f"score.mqar.beyond lists a setting twice: {[list(s) for s in out]}")
    return tuple(out)


def score_beyond(model, task: MqarTask, settings, *, n: int, seed: int, batch: int, device) -> dict:
    """``model`` (trained on ``task``) scored at each ``(seq_len, kv_pairs)`` of ``settings``, on ``n`` test instances
    of seed ``seed`` each: ``{"mqar_beyond": mean corrected accuracy, "mqar_beyond_settings": {key: {"raw", "baseline",
    "corrected"}}}``. Instances are scored in batches of at most ``batch`` rows and no more tokens than
    ``batch * task.seq_len``, so a long setting takes no more memory than training did."""
    if not settings:
        return {}
    device = torch.device(device)
    by_setting = {}
    with autocast_context(device, autocast_dtype("auto", device)), torch.no_grad():
        for L, K in settings:
            t = task.replace(seq_len=L, num_kv_pairs=K)
            x, y = make_mqar(t, n, seed, split="test")
            rows = max(1, min(batch, batch * task.seq_len // L))
            raw = hits_accuracy(label_hits(model, x, y, batch_size=rows, device=device), y)
            _, base = strongest(mqar_baselines(x, y, t.vocab_size, t.token_map))
            by_setting[setting_key(L, K)] = {"raw": round(raw, 4), "baseline": round(base, 4),
                                             "corrected": round(corrected(raw, base), 4)}
    mean = sum(v["corrected"] for v in by_setting.values()) / len(by_setting)
    return {"mqar_beyond": round(mean, 4), "mqar_beyond_settings": by_setting}
