"""The order runs start in when the workers will train every one of them anyway: longest expected first.

A calibration trains all its runs, and a search whose target covers every untried candidate trains all of them,
whatever order they start in; the order then decides only when the workers finish. Started in list order on the
first free worker, the longest runs first leave the short ones to fill in at the end (longest processing time
first), so the workers finish together instead of one training a long run alone while the other idles (on the
default CPU job the search's last run had been a 1200-step one, started while the other worker had 30 s left).

A recall run's length is not known before it trains, so :func:`expected_length` ranks by what the layout says:

* fewer attention layers first: the recall model stops at its target, and the pure models and layouts with little
  attention are the ones that do not reach it and train the whole step budget (on the default CPU space every pure
  model and attention-first 6:1 hybrid ran 1200 steps, every 3:1 hybrid 500-700);
* then the costlier step first: forward FLOPs per token of the recall model at the recall task's length
  (:func:`hlnas.model.cost.layout_cost`; HGRN-2's step is the slower of the default space's two mixers).

A layout whose recall was measured already (a calibration run at the study's seed:
:func:`hlnas.search.calibration.calibrated_recall`) trains only its LM half, the shortest work there is: those go last.

Only the order changes: each run trains and scores as it would in any other order (its seed, its data).
"""

from __future__ import annotations

from hlnas.space import SearchSpace

__all__ = ["expected_length", "longest_first"]


def expected_length(space: SearchSpace, layout: str) -> tuple[int, int]:
    """A sort key of ``layout``'s recall run in ``space``, smallest for the run expected to take longest:
    ``(attention layers, -forward FLOPs per token of its recall model at the recall task's length)``."""
    from hlnas.model.cost import layout_cost
    from hlnas.model.layout import Layout
    from hlnas.recall.proxy import recall_model_config

    mqar = space.score.mqar
    lay = Layout.parse(layout)
    cost = layout_cost(lay, recall_model_config(space.model, dict(mqar.model), mqar.vocab), context=mqar.seq_len)
    return len(lay.attention_layers), -cost.flops_per_token


def longest_first(space: SearchSpace, items: list, layout_of=str, measured=frozenset()) -> list:
    """``items`` sorted by :func:`expected_length` of ``layout_of(item)`` (stable: equals keep their order), those
    whose layout is in ``measured`` (recall already measured: the LM half only) last."""
    return sorted(items, key=lambda it: (layout_of(it) in measured, expected_length(space, layout_of(it))))
