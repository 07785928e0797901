"""The ``mqar_mixed`` objective: the trained candidate itself scored on held-out instances of the MQAR format that was
mixed into its training (:mod:`hlnas.lm.recall_mix`), at the training length and longer (``score.mqar_mixed.scales``),
beside their no-recall baselines (:func:`mixed_baselines`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from hlnas.errors import ConfigError
from hlnas.overrides import config_to_dict, tuples_of as _tuples
from hlnas.recall.baselines import mqar_baselines, strongest
from hlnas.recall.mqar import IGNORE, as_documents, make_mqar, mqar_accuracy

if TYPE_CHECKING:
    from hlnas.model.build import HybridLM

__all__ = ["MqarMixedConfig", "mqar_mixed_objective", "mixed_test_instances", "mixed_baselines"]


@dataclass(frozen=True, kw_only=True)
class MqarMixedConfig:
    """``score.mqar_mixed``; its test instances are ``score.mqar``'s count and seed (``test``, ``test_seed``),
    scored in batches of ``score.mqar.batch``."""

    scales: tuple[int, ...] = (1, 2)  # test lengths as multiples of the training length

    def __post_init__(self) -> None:
        _tuples(self, "scales")
        if not self.scales or any(int(m) != m or m < 1 for m in self.scales):
            raise ConfigError(f"score.mqar_mixed.scales must be whole multiples >= 1 of the training length, got {list(self.scales)}")

    def to_dict(self) -> dict:
        return config_to_dict(self)


def mixed_test_instances(trained_on, cfg, eos_id: int):
    """``(MqarTask, inputs, labels)`` per test length of the ``mqar_mixed`` objective (``cfg``: the score section, a
    :class:`~hlnas.score.objectives.ScoreConfig`): held-out instances of the trained format at each of
    ``cfg.mqar_mixed.scales`` x the training length, in document form, each right after a document separator as in
    training: ``cfg.mqar.test`` of them, ``cfg.mqar.test_seed``'s whatever the training seed."""
    for m in cfg.mqar_mixed.scales:
        mc = trained_on.replace(seq_len=trained_on.seq_len * int(m))
        x, y = make_mqar(mc, cfg.mqar.test, cfg.mqar.test_seed, split="test")
        sep = torch.full((x.shape[0], 1), eos_id, dtype=torch.long)
        yield mc, torch.cat([sep, as_documents(x, y)], 1), torch.cat([torch.full_like(sep, IGNORE), y], 1)


def _mean_over_lengths(by_length: dict[str, dict[str, float]]) -> dict:
    """Per-length baselines and their mean over the lengths, averaged as the accuracy is."""
    mean = {k: sum(b[k] for b in by_length.values()) / len(by_length) for k in next(iter(by_length.values()))}
    return {"mean": mean, "by_length": by_length}


def mixed_baselines(trained_on, cfg, eos_id: int) -> dict:
    """The no-recall baselines of the ``mqar_mixed`` test instances: per length, and averaged over lengths as
    the accuracy is (document form: eliminating revealed values is one)."""
    return _mean_over_lengths({str(mc.seq_len): mqar_baselines(x, y, mc.vocab_size, mc.token_map, document_form=True)
                               for mc, x, y in mixed_test_instances(trained_on, cfg, eos_id)})


def mqar_mixed_objective(model: HybridLM, trained_on, cfg, eos_id: int, *, seed: int = 0, device=None) -> dict:
    """Score a candidate trained with MQAR instances mixed in (``trained_on``: their MqarTask) on
    :func:`mixed_test_instances`, beside the no-recall baselines of the same instances."""
    by_length, base_by_length = {}, {}
    for mc, x, y in mixed_test_instances(trained_on, cfg, eos_id):  # one pass: each length's instances made once
        by_length[str(mc.seq_len)] = mqar_accuracy(model, x, y, batch_size=cfg.mqar.batch, device=device)
        base_by_length[str(mc.seq_len)] = mqar_baselines(x, y, mc.vocab_size, mc.token_map, document_form=True)
    base = _mean_over_lengths(base_by_length)
    name, b = strongest(base["mean"])
    return {"mqar_mixed_acc": sum(by_length.values()) / len(by_length), "mqar_mixed_baselines": base["mean"],
            "mqar_mixed_baseline": b, "mqar_mixed_baseline_name": name,
            "mqar_mixed": {"by_length": by_length, "baselines_by_length": base["by_length"],
                           "kv_pairs": trained_on.num_kv_pairs, "vocab": trained_on.vocab_size}}
