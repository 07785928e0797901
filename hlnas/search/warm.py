"""``hlnas warm``: compile a space's kernels once, at every shape its trials and its calibration train and score at,
so the search's first trials start on a warm Triton and inductor cache.

fla's Triton kernels autotune (and inductor compiles the recall model's blocks) per shape on their first call. A
trial meets its shapes in three places: the LM half's training step (``train.batch_size`` x ``train.seq_len``) and its
validation; the fresh recall model's step (``score.mqar.batch`` x ``score.mqar.seq_len``), its validation checks and
its test scoring. The calibration trains the same layouts' blocks at the same shapes. So one short trial per mixer,
at the space's own scale with only the budgets cut, meets every shape: the LM half trains two steps, the recall model
``score.mqar.eval_every`` steps (one validation check), then both score as a trial does. Each mixer is warmed in the
space's densest hybrid (the most attention), so the attention blocks beside it compile too.

Why a trial and not a separate warm-up script: one that trained at its own sequence length and scored MQAR on
shortened test batches left trials compiling on their first call (a cold GLA 3:1 recall trial took 11.3 s to its first
step where a warm one took 0.6 s; docs/results.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from hlnas.errors import ConfigError
from hlnas.model.layout import build_layout, parse_ratio
from hlnas.search.records import layout_spec
from hlnas.search.trial import run_trial
from hlnas.space import SearchSpace

__all__ = ["warm_layouts", "warm_budget_sets", "warm_space"]


def warm_layouts(space: SearchSpace, mixers: Sequence[str] | None = None) -> list[str]:
    """One layout per mixer of ``space`` (or of ``mixers``, each one of the space's): its densest hybrid among the
    space's ratios (its hetero ratio), else its pure model; then, unless ``mixers`` names the mixers, the all-attention
    model (the calibration's control, a candidate of most spaces)."""
    chosen = list(space.mixers) if mixers is None else list(mixers)
    unknown = [m for m in chosen if m not in space.mixers and m != "transformer"]
    if unknown:
        raise ConfigError(f"mixer(s) {', '.join(unknown)} not in space {space.name!r}; allowed: "
                          f"{', '.join([*space.mixers, 'transformer'])}")
    hybrids = [r for r in ([space.hetero_ratio] if space.hetero_ratio else space.ratios) if r and r != "pure"]
    densest = min(hybrids, key=parse_ratio) if hybrids else None  # 3:1 before 24:1: the most attention layers
    # a ratio of None builds the pure model (the all-attention one for the transformer)
    layouts = [str(build_layout(m, None if m == "transformer" else densest, space.n_layers)) for m in chosen]
    if mixers is None:
        layouts.append(str(build_layout("transformer", None, space.n_layers)))
    return list(dict.fromkeys(layouts))


def warm_budget_sets(space: SearchSpace) -> list[str]:
    """The ``--set`` items that cut a trial's budgets and keep its shapes: two LM training steps, one recall
    validation check."""
    t, mq = space.train, space.score.mqar
    return [f"train.tokens={2 * t.batch_size * t.seq_len}", f"score.mqar.steps={mq.eval_every}"]


def warm_space(space: SearchSpace, mixers: Sequence[str] | None = None,
               on_row: Callable[[dict], None] | None = None) -> list[dict]:
    """Run one short trial per :func:`warm_layouts` layout of ``space`` at its shapes (:func:`warm_budget_sets`), one
    after the other in this process; a row per layout: ``layout``, ``status``, ``seconds``, ``error``."""
    short = space.with_sets(warm_budget_sets(space))
    rows = []
    for i, layout in enumerate(warm_layouts(space, mixers)):
        t0 = time.perf_counter()
        result = run_trial(layout_spec(short, i, layout))
        row = {"layout": layout, "status": result.status, "seconds": round(time.perf_counter() - t0, 1),
               "error": (result.error or "").splitlines()[0][:200] if result.error else ""}
        rows.append(row)
        if on_row is not None:
            on_row(row)
    return rows
