"""Every metric a trial records, in one table: direction, unit, title, and what it needs.

The space validator (which metrics a study may optimise, and which score objective each needs), the
Pareto code (directions), the figures (axis titles, number formats) and the tabular benchmark all read
this table, so they cannot disagree. Adding a metric is one :func:`register` call here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hlnas.errors import ConfigError, did_you_mean

__all__ = ["bytes_text", "corrected", "Metric", "METRICS", "register", "get", "directions", "direction_of", "objective_metrics", "raw_recall_metrics",
           "RECALL_SOURCES", "RECALL_OBJECTIVES"]

#: where a trial's "recall" comes from, in order of preference: (score objective, its raw accuracy key); the
#: objective also reports ``<key prefix>_baseline`` (the strongest no-recall baseline) and ``..._baselines``
RECALL_SOURCES = (("ruler", "ruler_avg"), ("mqar_mixed", "mqar_mixed_acc"), ("mqar", "mqar_acc"))
#: the objectives that measure recall (the corrected final score and the graded learning AUC): a study with one is
#: calibrated first, a rung measures them at every step budget, the multi-fidelity table replays them
RECALL_OBJECTIVES = ("recall", "recall_auc", "recall_beyond")


def corrected(acc: float, baseline: float) -> float:
    """Baseline-corrected recall, ``max(0, (acc - b) / (1 - b))``: 0 at or below the baseline, 1 when perfect."""
    if not math.isfinite(acc):
        return float("nan")
    if baseline >= 1.0:
        return 0.0
    return max(0.0, (acc - baseline) / (1.0 - baseline))


@dataclass(frozen=True, kw_only=True)
class Metric:
    name: str  # the key in a trial's user attrs
    direction: str  # maximize | minimize
    title: str  # axis and table title
    unit: str = ""  # bytes | count | fraction | loss | tokens/s | s | ""
    needs: tuple[str, ...] = ()  # score objectives that produce it (any one of them); () = the cost model or training
    objective: bool = True  # may be a study objective
    raw_recall: bool = False  # a recall score not corrected for its no-recall baseline (refused as an objective)

    def __post_init__(self) -> None:
        if self.direction not in ("maximize", "minimize"):
            raise ConfigError(f"metric '{self.name}': direction {self.direction!r}; allowed: maximize, minimize")


METRICS: dict[str, Metric] = {}


def register(metric: Metric) -> Metric:
    if metric.name in METRICS and METRICS[metric.name] != metric:
        raise ConfigError(f"metric '{metric.name}' is registered twice with different settings")
    METRICS[metric.name] = metric
    return metric


def get(name: str) -> Metric:
    if name not in METRICS:
        raise ConfigError(f"unknown metric '{name}'.{did_you_mean(name, METRICS)} Known: {', '.join(METRICS)}")
    return METRICS[name]


def directions() -> dict[str, str]:
    return {m.name: m.direction for m in METRICS.values()}


def direction_of(name: str) -> str | None:
    """A column's direction: a registered metric's own, else by the family its name belongs to (per-length RULER
    and MQAR columns maximize, ``kv_cache_bytes_*`` minimize); None for a column of no known family."""
    if name in METRICS:
        return METRICS[name].direction
    if name.startswith(("ruler", "mqar", "kv_cache_bytes")):
        return "minimize" if name.startswith("kv_") else "maximize"
    return None


def objective_metrics() -> tuple[str, ...]:
    """What a study may optimise."""
    return tuple(m.name for m in METRICS.values() if m.objective and not m.raw_recall)


def raw_recall_metrics() -> tuple[str, ...]:
    return tuple(m.name for m in METRICS.values() if m.raw_recall)


_RECALL = tuple(obj for obj, _ in RECALL_SOURCES)
for _m in (
    # recall corrected for its strongest no-recall baseline, max(0, (raw - b) / (1 - b)) (hlnas.recall.baselines)
    Metric(name="recall", direction="maximize", title="recall", unit="fraction", needs=_RECALL),
    # how readily a layout learns recall: area under the fresh recall model's corrected validation curve over its
    # step budget (hlnas.recall.proxy.learning_auc); grades layouts that all reach the target at the end
    Metric(name="recall_auc", direction="maximize", title="recall learning AUC", unit="fraction", needs=("mqar",)),
    # the fresh recall model scored beyond its training setting (longer contexts, more pairs): the mean of each
    # setting's corrected accuracy (hlnas.recall.beyond); grades layouts that all saturate at the training setting
    Metric(name="recall_beyond", direction="maximize", title="recall beyond training", unit="fraction", needs=("mqar",)),
    Metric(name="recall_raw", direction="maximize", title="recall (raw)", unit="fraction", needs=_RECALL, raw_recall=True),
    Metric(name="recall_baseline", direction="maximize", title="no-recall baseline", unit="fraction", objective=False),
    Metric(name="ruler", direction="maximize", title="RULER average", unit="fraction", needs=("ruler",), raw_recall=True),
    Metric(name="ruler_avg", direction="maximize", title="RULER average", unit="fraction", needs=("ruler",), raw_recall=True),
    Metric(name="mqar_acc", direction="maximize", title="MQAR accuracy", unit="fraction", needs=("mqar",), raw_recall=True),
    Metric(name="mqar_mixed_acc", direction="maximize", title="mixed-in MQAR accuracy", unit="fraction",
           needs=("mqar_mixed",), raw_recall=True),
    Metric(name="lm_acc", direction="maximize", title="LM accuracy", unit="fraction", needs=("lm_eval",)),
    Metric(name="val_loss", direction="minimize", title="validation loss", unit="loss", needs=("val_loss",)),
    Metric(name="kv_cache_bytes", direction="minimize", title="KV cache", unit="bytes"),
    Metric(name="state_bytes", direction="minimize", title="recurrent state", unit="bytes"),
    Metric(name="inference_bytes", direction="minimize", title="inference memory", unit="bytes"),
    Metric(name="params", direction="minimize", title="parameters", unit="count"),
    Metric(name="flops_per_token", direction="minimize", title="FLOPs per token", unit="count"),
    Metric(name="tokens_per_s", direction="maximize", title="training tokens/s", unit="tokens/s", objective=False),
    Metric(name="steady_tokens_per_s", direction="maximize", title="steady training tokens/s", unit="tokens/s", objective=False),
    Metric(name="train_wall_s", direction="minimize", title="training time", unit="s", objective=False),
):
    register(_m)


def bytes_text(n: float, *, exact: bool = False) -> str:
    """A byte count in the largest binary unit it reaches ('3.00 MiB'); ``exact`` adds the count ('3.00 MiB
    (3,145,728 B)'). Below 1 KiB: whole bytes. The one format of bytes for the terminal, plots and reports."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            text = f"{n / size:.2f} {unit}"
            return f"{text} ({n:,} B)" if exact else text
    return f"{int(n)} B"
