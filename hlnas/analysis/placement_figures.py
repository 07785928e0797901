"""Where the attention layers sit, and what it does to recall: one panel per (mixer, ratio) that the study trained at
two placements or more, split into an info (tested) and a plotly figure, like :mod:`hlnas.analysis.figures`.

At a fixed mixer and ratio every placement holds the same KV cache, so the recall-vs-KV figure stacks them in one
column and the ratio figure pools them; this one sets them side by side. Placements are ordered by the depth of their
first attention layer, the axis along which a GPU placement run split (HGRN-2 6:1 learned MQAR with its first
attention layer at 0, 2 or 5 of 24, never at 10 or 20). Recall
is drawn raw beside the study's no-recall band wherever the trials carry it, as every hlnas recall figure.
"""

from __future__ import annotations

from typing import NamedTuple

from hlnas.analysis.figure_style import MIXER_COLORS, empty, hover, metric_titles, mixer_rank, recall_baseline
from hlnas.errors import LayoutError, UnknownMixerError
from hlnas.model.layout import Layout, placement_of
from hlnas.analysis.paper import attention_share, mixer_and_ratio
from hlnas.analysis.pareto import StudyData

__all__ = ["PlacementPoint", "PlacementInfo", "placement_info", "plot_placement"]


class PlacementPoint(NamedTuple):
    placement: str  # hlnas.model.layout.placement_of: paper, front, back, middle, spread or explicit:i,j
    first: int  # the first attention layer's index
    value: float
    number: int  # the trial
    hover: str


class PlacementInfo(NamedTuple):
    groups: tuple[tuple[str, str, tuple[PlacementPoint, ...]], ...]  # (mixer, ratio, points by first layer)
    metric: str  # recall_raw beside its baseline where trials carry it, else recall
    title: str  # the y axis
    baseline: float | None  # the strongest no-recall baseline (raw recall at or under it is no recall)


def placement_info(data: StudyData) -> PlacementInfo:
    """Every ok single-mixer hybrid trial, grouped by (mixer, ratio); the groups with two placements or more, in order
    of attention share then mixer, each group's points by first attention layer (one point a layout: a reused result
    is the same run)."""
    ok = [r for r in data.records if r.status == "ok" and r.layout]
    raw = any(r.metric("recall_raw") is not None for r in ok)
    metric = "recall_raw" if raw else "recall"
    baseline = recall_baseline(data)[0] if raw else None
    by_cell: dict[tuple[str, str], dict[str, PlacementPoint]] = {}
    for r in ok:
        mixer, ratio = mixer_and_ratio(r)
        value = r.metric(metric)
        if mixer in (None, "transformer") or value is None:
            continue
        try:
            layout = Layout.parse(r.layout)
        except (LayoutError, UnknownMixerError):  # a layout string from a newer catalog: not placed
            continue
        name = placement_of(layout)
        if name is None:  # a pure model: no attention to place
            continue
        cell = by_cell.setdefault((mixer, ratio), {})
        cell.setdefault(r.layout, PlacementPoint(name, layout.attention_layers[0], value, r.number, hover(r)))
    cells = sorted(by_cell, key=lambda cell: (attention_share(cell[1]), mixer_rank(cell[0]), cell[0]))
    groups = tuple((m, ratio, tuple(sorted(by_cell[m, ratio].values(), key=lambda p: (p.first, p.placement))))
                   for m, ratio in cells if len({p.placement for p in by_cell[m, ratio].values()}) >= 2)
    title = metric_titles(data).get("recall_raw" if raw else "recall", metric)
    return PlacementInfo(groups, metric, title, baseline)


def plot_placement(info: PlacementInfo):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    title = "Recall by placement of the attention layers (same ratio, same KV cache)"
    if not info.groups:
        return empty(title, "no mixer and ratio has trials at two placements yet (a space with several placements, "
                            "e.g. hlnas/spaces/placement.yaml, has)")
    cols = min(4, len(info.groups))
    rows = -(-len(info.groups) // cols)
    fig = make_subplots(rows=rows, cols=cols, shared_yaxes=True, horizontal_spacing=0.04, vertical_spacing=0.2,
                        subplot_titles=[f"{m} {ratio}" for m, ratio, _ in info.groups])
    for i, (mixer, ratio, points) in enumerate(info.groups):
        row, col = i // cols + 1, i % cols + 1
        # a category a point: two placements may share a first layer (front and spread both start at 0)
        ticks = [f"{p.placement.split(':')[0]} · {p.first}" for p in points]
        xs = [f"#{p.number}" for p in points]
        fig.add_trace(go.Scatter(x=xs, y=[p.value for p in points], mode="markers", showlegend=False,
                                 marker=dict(size=10, color=MIXER_COLORS.get(mixer, "#444")),
                                 hovertext=[p.hover for p in points], hovertemplate="%{hovertext}<extra></extra>"),
                      row=row, col=col)
        fig.update_xaxes(type="category", tickvals=xs, ticktext=ticks, row=row, col=col)
        if info.baseline is not None:
            fig.add_hrect(y0=0, y1=info.baseline, fillcolor="#888", opacity=0.15, line_width=0, row=row, col=col)
    fig.update_yaxes(range=[0, 1.05])
    fig.update_yaxes(title_text=info.title + ("; shaded: no recall" if info.baseline is not None else ""), col=1)
    fig.update_xaxes(title_text="placement · first attention layer")
    fig.update_layout(title=title, template="plotly_white", height=200 + 320 * rows, margin=dict(l=70, r=20, t=80, b=60))
    return fig
