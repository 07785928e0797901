"""The rows of a tabular benchmark (:mod:`hlnas.analysis.tabular`): a CSV row's layout, its numbers and marks (an ``error`` or
``infeasible`` row), the rows that break the space's constraints, and the space a table of layouts implies.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from hlnas import metrics as metric_table
from hlnas.model.catalog import canonical
from hlnas.errors import ConfigError, HlnasError
from hlnas.model.layout import PLACEMENTS, TRANSFORMER, Layout, build_layout
from hlnas.space import EXPLICIT, SearchSpace, space_from_dict

__all__ = ["marked", "violating", "describe", "number", "impossible", "indices", "row_layout", "infer_space"]


def marked(row: Mapping[str, Any]) -> str | None:
    """"failed" or "infeasible" when the row's ``status`` column says so (a results CSV's), else None."""
    status = str(row.get("status") or "").strip().lower()
    return "infeasible" if status == "infeasible" else "failed" if status in ("failed", "fail") else None


def violating(space: SearchSpace, table: Mapping[str, Any], params: Mapping[str, dict]) -> frozenset:
    """The rows whose candidate breaks one of the space's constraints, by the cost the search itself checks."""
    if not space.constraints:
        return frozenset()
    from hlnas.search.records import constraint_values, trial_spec
    from hlnas.model.cost import layout_metrics

    out = set()
    for lay in table:
        spec = trial_spec(space, 0, params[lay])
        cost = layout_metrics(spec.layout, spec.recipe.model, spec.kv_context, spec.placement)
        if any(v > 0 for v in constraint_values(space, cost).values()):
            out.add(lay)
    return frozenset(out)


def describe(layout: Layout) -> str:
    if not layout.linear_mixers:
        return f"transformer ({layout})"
    return f"{'+'.join(layout.linear_mixers)} {layout.ratio} attention {list(layout.attention_layers)} ({layout})"


def number(v) -> float | None:
    if v is None or (isinstance(v, str) and not v.strip()):
        return None
    if isinstance(v, bool):
        raise ValueError(v)
    x = float(v)
    return x if math.isfinite(x) else None


def impossible(column: str, value: float) -> str | None:
    """What a value of ``column`` must be when ``value`` cannot be one (a fraction outside [0, 1], a negative count of
    bytes or parameters), by the unit of the metric of that name (:mod:`hlnas.metrics`; ``kv_cache_bytes_*`` counts
    bytes); None when it can be, or the column is no known metric."""
    unit = metric_table.METRICS[column].unit if column in metric_table.METRICS else (
        "bytes" if column.startswith("kv_cache_bytes") else "")
    if unit == "fraction" and not 0 <= value <= 1:
        return "a fraction in [0, 1]"
    if unit in ("bytes", "count") and value < 0:
        return "a byte count >= 0" if unit == "bytes" else "a count >= 0"
    return None


def indices(v) -> list[int] | None:
    if v is None or (isinstance(v, str) and not v.strip()):
        return None
    if isinstance(v, (list, tuple)):
        return [int(x) for x in v]
    return [int(x) for x in re.findall(r"-?\d+", str(v))]


def row_layout(row: Mapping[str, Any], n_layers: int | None) -> Layout:
    text = row.get("layout")
    if isinstance(text, str) and text.strip():
        layout = Layout.parse(text)
        mixer = row.get("mixer")
        if isinstance(mixer, str) and mixer.strip():
            m = canonical(mixer.strip())
            have = list(layout.linear_mixers) or [TRANSFORMER]
            if m not in have:
                raise ConfigError(f"column mixer={mixer!r} disagrees with layout {layout} (mixers {', '.join(have)})")
        return layout
    mixer = row.get("mixer")
    if not isinstance(mixer, str) or not mixer.strip():
        raise ConfigError("no layout and no mixer")
    mixer, n = canonical(mixer.strip()), n_layers or 24
    if mixer == TRANSFORMER:
        return build_layout(TRANSFORMER, None, n)
    ratio = str(row.get("ratio") or "").strip() or "pure"
    attn = indices(row.get("attention_layers"))
    placement = str(row.get("placement") or "").strip()
    if attn is not None:
        return build_layout(mixer, None, n, attn) if attn else build_layout(mixer, "pure", n)
    if placement.startswith(EXPLICIT + ":"):
        return build_layout(mixer, None, n, indices(placement.split(":", 1)[1]) or [])
    if ratio == "pure":
        return build_layout(mixer, "pure", n)
    return build_layout(mixer, ratio, n, placement or "paper")


def infer_space(layouts: list[Layout], name: str) -> SearchSpace:
    """The smallest product space (mixers x ratios x placements, + Transformer) holding these layouts."""
    n = {lay.n_layers for lay in layouts}
    if len(n) != 1:
        raise ConfigError(f"table '{name}': rows have different depths {sorted(n)}; give the space they came from")
    n_layers = n.pop()
    mixers, ratios, placements, sets, transformer = {}, {}, {}, {}, False
    for lay in layouts:
        if not lay.linear_mixers:
            transformer = True
            continue
        if len(lay.linear_mixers) > 1:
            raise ConfigError(f"table '{name}': row {lay} mixes {', '.join(lay.linear_mixers)}; cannot infer a space "
                              "from heterogeneous rows, give the space they came from (space=..., --space)")
        m, ratio = lay.linear_mixers[0], lay.ratio
        mixers.setdefault(m)
        if ratio == "pure":
            ratios.setdefault("pure")
            continue
        for p in PLACEMENTS:
            try:
                if build_layout(m, ratio, n_layers, p) == lay:
                    ratios.setdefault(ratio)
                    placements.setdefault(p)
                    break
            except HlnasError:  # e.g. a/n ratios: no strategy builds them
                pass
        else:
            sets.setdefault(tuple(lay.attention_layers))
    from hlnas.model.catalog import linear_mixer_names
    from hlnas.model.layout import parse_ratio

    order = linear_mixer_names()
    raw = {"name": name, "mixers": sorted(mixers, key=order.index), "layers": n_layers, "transformer": transformer,
           "ratios": sorted(ratios, key=lambda r: 0 if r == "pure" else 1 / parse_ratio(r)),
           "placements": [p for p in PLACEMENTS if p in placements] + ([EXPLICIT] if sets else []) or ["paper"],
           "attention_sets": [list(s) for s in sets]}
    if not mixers:  # only the Transformer
        for k in ("ratios", "placements", "attention_sets"):
            del raw[k]
    elif sets and all(r == "pure" for r in ratios):  # explicit sets are reached through a hybrid ratio only
        raise ConfigError(f"table '{name}': rows use only explicit attention sets; give the space they came from")
    return space_from_dict(raw, where=f"space inferred from table '{name}'")


# -- running a sampler ---------------------------------------------------------------------------
