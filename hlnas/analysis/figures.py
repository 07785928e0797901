"""Plotly figures of an hlnas study, each split into an info builder (pure, tested) and a plot function.

``build_figures(study_data(study))`` returns every figure under a stable id (:data:`FIGURE_IDS`):

* ``hlnas_recall_vs_kv`` / ``hlnas_loss_vs_kv``: the trade-offs, front connected, dominated faded,
  infeasible crossed, each point labelled by its layout string, hover showing its metrics;
* ``hlnas_recall_vs_ratio`` / ``hlnas_lm_vs_ratio``: the paper's Figure 2, one line per mixer,
  x = pure, 24:1, 12:1, 6:1, 3:1 (then any other ratios by attention share), Transformer dashed;
* ``hlnas_ruler``: RULER groups (or tasks) of chosen candidates, grouped bars; the front by default;
* ``hlnas_hypervolume``: hypervolume after each completed trial;
* ``hlnas_layouts``: rows = candidates, columns = layers, colour = mixer, attention in red;
* ``hlnas_calibration`` / ``hlnas_calibration_table``: the recall protocol's controls and verdict;
* ``hlnas_recall_vs_placement``: raw recall beside the no-recall band per placement of the attention layers, a panel
  per (mixer, ratio) trained at two placements or more, placements by their first attention layer
  (:mod:`hlnas.analysis.placement_figures`);
* ``hlnas_recall_curves``: corrected recall at every check of each trial's fresh recall model (user attr
  ``hlnas_checks``), one line per trial coloured by mixer, the front thick, trials the rung scheduler stopped
  dotted, paused or running ones dashed, the rungs' step budgets as vertical lines.

For a paper-grid study (``StudyData.paper_grid``) the paper's numbers are overlaid with open markers and
dotted lines, named ``paper (arXiv 2507.06457, Table N)`` (see :mod:`hlnas.analysis.paper` for what each table is).
Plotly is imported inside the plot functions only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import hlnas.metrics as metric_table
from hlnas.analysis import paper
from hlnas.model.catalog import MIXERS, mixer_entry, mixer_for_code
from hlnas.model.layout import PAPER_RATIOS, layer_tokens
from hlnas.analysis.pareto import (
    ParetoInfo, StudyData, front, hypervolume_history, pareto_info,
)  # fmt: skip
from hlnas.analysis.paper import attention_share, mixer_and_ratio
from hlnas.analysis.figure_style import MIXER_COLORS, empty, format_metric, hover, metric_titles, mixer_rank, recall_baseline
from hlnas.analysis.placement_figures import placement_info, plot_placement
from hlnas.analysis.calibration_figures import (CURVE_METRICS, CalibrationInfo, CurveLine, CurvesInfo, calibration_info, curves_info,
                                       plot_calibration, plot_calibration_table, plot_curves)

__all__ = [
    "FIGURE_IDS", "MIXER_COLORS", "TradeoffInfo", "RatioInfo", "RulerInfo", "HypervolumeInfo", "LayoutInfo",
    "CalibrationInfo", "calibration_info", "plot_calibration", "plot_calibration_table", "recall_baseline",
    "tradeoff_info", "ratio_info", "ruler_info", "hypervolume_info", "layout_info", "plot_tradeoff", "plot_ratio",
    "plot_ruler", "plot_hypervolume", "plot_layouts", "build_figures", "format_metric", "metric_titles",
    "CurveLine", "CurvesInfo", "curves_info", "plot_curves", "CURVE_METRICS",
]  # fmt: skip

PAPER_RULER_AXIS = "RULER average, ranks only"  # the paper's recall measure beside a graded one (hlnas.analysis.paper)
FIGURE_IDS = ("hlnas_recall_vs_kv", "hlnas_loss_vs_kv", "hlnas_recall_vs_ratio", "hlnas_lm_vs_ratio",
              "hlnas_ruler", "hlnas_hypervolume", "hlnas_layouts", "hlnas_calibration",
              "hlnas_calibration_table", "hlnas_recall_curves", "hlnas_recall_vs_placement")  # fmt: skip
# -- trade-offs ----------------------------------------------------------------------------


class TradeoffInfo(NamedTuple):
    pareto: ParetoInfo
    kv_context: int | None
    paper_points: tuple[tuple[float, float, str, str], ...]  # (x, y, hover, label) from the paper
    titles: dict[str, str]  # metric -> axis title
    baseline: float | None = None  # the strongest no-recall baseline: the shaded band below it is "no recall"
    baseline_name: str | None = None
    corrected: bool = False  # y is a baseline-corrected measure (a graded objective): "no recall" is y = 0
    # the paper's RULER averages on their own axis: beside a graded measure (recall_auc) they are another quantity,
    # comparable by rank only (hlnas.analysis.paper); beside final recall both are accuracies and share the axis
    paper_secondary: bool = False


def tradeoff_info(data: StudyData, y_metric: str = "recall", x_metric: str = "kv_cache_bytes") -> TradeoffInfo:
    """A trade-off; ``recall`` is drawn raw beside its no-recall band when the trials carry baselines (the
    corrected recall the study optimises is a monotone map of it, so the front is the same). When the study's recall
    objective is another measure (``recall_auc``, graded) that measure is drawn, its front, with "no recall" at 0."""
    baseline, baseline_name, corrected = None, None, False
    if y_metric == "recall":
        baseline, baseline_name = recall_baseline(data)
        corrected = data.objective_metric("recall") != "recall"
        if baseline is not None and not corrected:
            y_metric = "recall_raw"
    info = pareto_info(data.records, None, x_metric, y_metric)
    points = {}
    if data.paper_grid and y_metric == "recall":
        table7, t_recall = paper.recall_by_ratio(), paper.transformer_recall()
        for rec in (*info.front, *info.dominated):
            mixer, ratio = mixer_and_ratio(rec)
            x = rec.metric(x_metric)
            if mixer == "transformer":
                points[(mixer, x)] = (x, t_recall, f"{paper.paper_label(5)}<br>Transformer RULER avg {t_recall}", paper.paper_label(5))
            elif ratio in table7.get(mixer, {}):
                v = table7[mixer][ratio]
                points[(mixer, ratio, x)] = (x, v, f"{paper.paper_label(7)}<br>{mixer} {ratio}: RULER avg {v}", paper.paper_label(7))
    return TradeoffInfo(info, data.kv_context, tuple(points.values()), metric_titles(data), baseline, baseline_name, corrected,
                        paper_secondary=corrected and bool(points))


def plot_tradeoff(info: TradeoffInfo):
    import plotly.graph_objects as go

    p = info.pareto
    (xm, ym), (xd, yd) = p.metrics, p.directions
    title = f"{info.titles.get(ym, ym)} vs {info.titles.get(xm, xm)}"
    if not p.front:
        return empty(title, f"no completed trial has both {xm} and {ym} yet")
    fig = go.Figure()

    def trace(recs, name, **kw):
        xs, ys = zip(*(p.point(r) for r in recs))
        fig.add_trace(go.Scatter(x=xs, y=ys, name=name, text=[r.layout for r in recs], hovertext=[hover(r) for r in recs],
                                 hovertemplate="%{hovertext}<extra></extra>", **kw))

    if p.dominated:
        trace(p.dominated, "dominated", mode="markers+text", opacity=0.35, textposition="top center",
              marker=dict(color="#7f7f7f", size=7), textfont=dict(size=8, color="#7f7f7f"))
    scored_infeasible = [r for r in p.infeasible if all(v is not None and math.isfinite(v) for v in p.point(r))]
    if scored_infeasible:
        trace(scored_infeasible, "infeasible", mode="markers", opacity=0.5,
              marker=dict(symbol="x", color="#bbbbbb", size=8))
    # Steps along the attainment surface (the edge of the dominated region), not straight segments:
    # with x minimized and the front sorted by x, each step goes right first, then to the next point.
    shape = "hv" if xd == "minimize" else "vh"
    trace(p.front, "Pareto front", mode="lines+markers+text", line=dict(color="#d62728", shape=shape),
          marker=dict(color="#d62728", size=10, line=dict(color="white", width=1)), textposition="top center",
          textfont=dict(size=10))
    for label in dict.fromkeys(pt[3] for pt in info.paper_points):
        pts = [pt for pt in info.paper_points if pt[3] == label]
        symbol = "square-open" if label == paper.paper_label(5) else "diamond-open"
        fig.add_trace(go.Scatter(x=[pt[0] for pt in pts], y=[pt[1] for pt in pts], mode="markers", name=label,
                                 hovertext=[pt[2] for pt in pts], hovertemplate="%{hovertext}<extra></extra>",
                                 yaxis="y2" if info.paper_secondary else "y",
                                 marker=dict(symbol=symbol, size=11, color="#1f77b4", line=dict(width=2))))
    # pad the x range so the layout labels of the extreme points are not cut off
    xs = [p.point(r)[0] for r in (*p.front, *p.dominated, *scored_infeasible)]
    lo, hi = min(xs), max(xs)
    pad = 0.18 * (hi - lo) if hi > lo else max(abs(hi), 1.0) * 0.5
    if info.corrected:  # a corrected measure is 0 at or below the no-recall baseline
        raw = "" if info.baseline is None else f" (raw at or below {info.baseline_name or 'the baseline'} {info.baseline:.3f})"
        fig.add_hline(y=0, line=dict(color="#999999", width=6), opacity=0.4, layer="below", annotation_text=f"no recall: 0{raw}",
                      annotation_position="top left", annotation_font=dict(size=10, color="#555555"))
    elif info.baseline is not None:  # below the strongest no-association strategy a score is not recall
        fig.add_hrect(y0=0, y1=info.baseline, fillcolor="#999999", opacity=0.18, line_width=0, layer="below",
                      annotation_text=f"no recall: at or below {info.baseline_name or 'the baseline'} {info.baseline:.3f}",
                      annotation_position="top left", annotation_font=dict(size=10, color="#555555"))
    counts = f"{len(p.front)} on front, {len(p.dominated)} dominated, {len(p.infeasible)} infeasible, {len(p.failed)} failed"
    ctx = f" at {info.kv_context} tokens" if xm == "kv_cache_bytes" and info.kv_context else ""
    x_title = f"{info.titles.get(xm, xm)}{ctx} ({'lower' if xd == 'minimize' else 'higher'} is better)"
    fig.update_layout(
        title=dict(text=f"{title}<br><sup>{counts}</sup>"), template="plotly_white",
        xaxis=dict(title=x_title, tickformat="~s", range=[lo - pad, hi + pad], ticksuffix="B" if xm.endswith("_bytes") else ""),
        yaxis=dict(title=f"{info.titles.get(ym, ym)} ({'lower' if yd == 'minimize' else 'higher'} is better)"),
        legend=dict(orientation="h", y=-0.25), margin=dict(l=60, r=60 if info.paper_secondary else 20, t=70, b=40),
    )  # fmt: skip
    if info.paper_secondary:
        fig.update_layout(yaxis2=dict(title=f"paper ({paper.PAPER}, Tables 5, 7): {PAPER_RULER_AXIS}", overlaying="y", side="right",
                                      showgrid=False, tickformat=".2f"))
    return fig


# -- metric against ratio (the paper's Figure 2) --------------------------------------------


class RatioInfo(NamedTuple):
    metric: str
    direction: str
    ratios: tuple[str, ...]  # x axis, by attention share (pure first)
    lines: dict[str, tuple[float | None, ...]]  # mixer -> mean per ratio
    counts: dict[str, tuple[int, ...]]
    transformer: float | None
    paper_lines: dict[str, tuple[float | None, ...]]
    paper_transformer: float | None
    paper_label: str | None
    paper_secondary: bool  # the paper's numbers are another measure (Table 6; Table 7 beside a graded recall): own y axis
    titles: dict[str, str]
    paper_axis: str | None = None  # the secondary axis's title


def _lm_metric(data: StudyData) -> str:
    return "lm_acc" if any(r.metric("lm_acc") is not None for r in data.records) else "val_loss"


def ratio_info(data: StudyData, metric: str = "recall") -> RatioInfo:
    """Mean ``metric`` of each (mixer, ratio) over ok trials of single-mixer layouts (placements pooled)."""
    sums: dict[tuple[str, str], list[float]] = {}
    for rec in data.records:
        value = rec.metric(metric)
        mixer, ratio = mixer_and_ratio(rec)
        if rec.status == "ok" and value is not None and math.isfinite(value) and mixer and ratio:
            sums.setdefault((mixer, ratio), []).append(value)
    ratios = sorted({r for (m, r) in sums if m != "transformer"}, key=lambda r: (attention_share(r), r))
    if data.paper_grid:
        ratios = sorted(set(ratios) | set(PAPER_RATIOS), key=lambda r: (attention_share(r), r))
    mixers = sorted({m for (m, _) in sums if m != "transformer"}, key=mixer_rank)

    def mean(v):
        return sum(v) / len(v) if v else None

    lines = {m: tuple(mean(sums.get((m, r), [])) for r in ratios) for m in mixers}
    counts = {m: tuple(len(sums.get((m, r), [])) for r in ratios) for m in mixers}
    transformer = mean(sums.get(("transformer", "transformer"), []))
    paper_lines, paper_t, label, secondary, axis = {}, None, None, False, None
    if data.paper_grid and metric == "recall":
        grid, label, paper_t = paper.recall_by_ratio(), paper.paper_label(7), paper.transformer_recall()
        secondary = data.objective_metric("recall") != "recall"  # a graded recall: RULER averages on their own axis
        axis = f"{label}: {PAPER_RULER_AXIS}" if secondary else None
    elif data.paper_grid and metric in ("lm_acc", "val_loss"):
        grid, label, secondary = paper.lm_by_ratio(), paper.paper_label(6) + ", relative ranking only", True
        axis = f"{label} (LM acc)"
    else:
        grid = {}
    for m, by_ratio in grid.items():
        if m in mixers:  # the paper's Average column mixes other mixers: left out
            paper_lines[m] = tuple(by_ratio.get(r) for r in ratios)
    direction = metric_table.get(metric).direction  # an unknown metric is an error, not silently "maximize"
    return RatioInfo(metric, direction, tuple(ratios), lines, counts, transformer, paper_lines, paper_t, label, secondary,
                     metric_titles(data), axis)


def plot_ratio(info: RatioInfo):
    import plotly.graph_objects as go

    title = f"{info.titles.get(info.metric, info.metric)} vs attention ratio"
    if not info.lines and info.transformer is None:
        return empty(title, f"no completed single-mixer trial has {info.metric} yet")
    fig = go.Figure()
    for m, ys in info.lines.items():
        # a ratio this mixer has no trial at is a gap, not a straight line through it (a grid still being trained)
        fig.add_trace(go.Scatter(x=list(info.ratios), y=list(ys), name=m, mode="lines+markers", connectgaps=False,
                                 customdata=list(info.counts[m]), line=dict(color=MIXER_COLORS.get(m)),
                                 hovertemplate=f"{m} %{{x}}: %{{y:.4g}} (mean of %{{customdata}} trials)<extra></extra>"))
    if info.transformer is not None:
        fig.add_hline(y=info.transformer, line=dict(dash="dash", color=MIXER_COLORS["transformer"]),
                      annotation_text="Transformer (this study)", annotation_position="top left")
    axis = "y2" if info.paper_secondary else "y"
    for m, ys in info.paper_lines.items():
        fig.add_trace(go.Scatter(x=list(info.ratios), y=list(ys), name=f"{m}: {info.paper_label}", mode="lines+markers",
                                 yaxis=axis, connectgaps=True, legendgroup="paper", opacity=0.8,
                                 line=dict(color=MIXER_COLORS.get(m), dash="dot"), marker=dict(symbol="diamond-open", size=9),
                                 hovertemplate=f"{info.paper_label}<br>{m} %{{x}}: %{{y}}<extra></extra>"))
    if info.paper_transformer is not None:
        fig.add_hline(y=info.paper_transformer, line=dict(dash="dot", color=MIXER_COLORS["transformer"]), yref=axis,
                      annotation_text=f"Transformer, {paper.paper_label(5)}", annotation_position="bottom right")
    better = "lower" if info.direction == "minimize" else "higher"
    layout = dict(title=title, template="plotly_white", legend=dict(orientation="h", y=-0.2),
                  xaxis=dict(title="attention ratio (linear:attention layers)", type="category",
                             categoryorder="array", categoryarray=list(info.ratios)),
                  yaxis=dict(title=f"{info.titles.get(info.metric, info.metric)} ({better} is better)"),
                  margin=dict(l=60, r=60, t=50, b=40))  # fmt: skip
    if info.paper_secondary:
        layout["yaxis2"] = dict(title=info.paper_axis, overlaying="y", side="right", showgrid=False, tickformat=".3f")
        if info.direction == "minimize":  # loss is lower-better, the paper's accuracy higher-better: up = better on both
            layout["yaxis"].update(autorange="reversed", title=f"{info.titles.get(info.metric, info.metric)} (axis reversed: up is better)")
    fig.update_layout(**layout)
    return fig


# -- RULER breakdown -----------------------------------------------------------------------


class RulerInfo(NamedTuple):
    level: str  # groups | tasks
    columns: tuple[str, ...]
    bars: tuple[tuple[str, tuple[float | None, ...]], ...]  # (candidate label, one score per column)
    paper_bars: tuple[tuple[str, tuple[float | None, ...]], ...]
    paper_label: str | None


def ruler_info(data: StudyData, candidates: Sequence[int] | None = None, level: str = "groups") -> RulerInfo:
    """RULER scores of trials ``candidates`` (numbers; default the recall-vs-KV front) per group or task."""
    if level not in ("groups", "tasks"):
        raise ValueError(f"level {level!r} is not allowed; allowed: groups, tasks")
    by_number = {r.number: r for r in data.records}
    if candidates is None:
        chosen = list(pareto_info(data.records, None, "kv_cache_bytes", "recall").front)
    else:
        missing = [n for n in candidates if n not in by_number]
        if missing:
            raise ValueError(f"trial {missing[0]} is not in study '{data.name}'; trials: 0..{len(by_number) - 1}")
        chosen = [by_number[n] for n in candidates]
    chosen = [r for r in chosen if isinstance(r.attrs.get("ruler"), dict)]
    columns: list[str] = list(paper.RULER_GROUP_ORDER) if level == "groups" else []
    for r in chosen:
        for key in r.attrs["ruler"].get(level, {}):
            if key not in columns:
                columns.append(key)
    bars = tuple((f"#{r.number} {r.layout}", tuple(r.attrs["ruler"].get(level, {}).get(c) for c in columns)) for r in chosen)
    paper_bars, label = (), None
    if data.paper_grid and level == "groups":
        label = paper.paper_label(5)
        paper_bars = tuple(("Transformer" if m == "transformer" else f"{m} {ratio}", tuple(g.get(c) for c in columns))
                           for (m, ratio), g in paper.ruler_groups().items())
    return RulerInfo(level, tuple(columns), bars, paper_bars, label)


def plot_ruler(info: RulerInfo):
    import plotly.graph_objects as go

    title = f"RULER by {info.level[:-1]}"
    if not info.bars:
        return empty(title, "no chosen trial has RULER results (objective 'ruler' not run?)")
    fig = go.Figure()
    for label, ys in info.bars:
        fig.add_trace(go.Bar(name=label, x=list(info.columns), y=list(ys), hovertemplate=f"{label}<br>%{{x}}: %{{y:.3f}}<extra></extra>"))
    for label, ys in info.paper_bars:
        fig.add_trace(go.Bar(name=f"{label}: {info.paper_label}", x=list(info.columns), y=list(ys), opacity=0.55,
                             marker=dict(pattern=dict(shape="/")), legendgroup="paper", visible="legendonly",
                             hovertemplate=f"{info.paper_label}<br>{label} %{{x}}: %{{y}}<extra></extra>"))
    note = f"<br><sup>{info.paper_label}: hidden, click its legend entries</sup>" if info.paper_bars else ""
    fig.update_layout(title=dict(text=title + note),
                      barmode="group", template="plotly_white", yaxis=dict(title="score", range=[0, 1]),
                      legend=dict(orientation="h", y=-0.2), margin=dict(l=60, r=20, t=50, b=40))  # fmt: skip
    return fig


# -- hypervolume ---------------------------------------------------------------------------


class HypervolumeInfo(NamedTuple):
    history: tuple[tuple[int, float], ...]
    objectives: tuple[str, ...]
    note: str


def hypervolume_info(data: StudyData, reference: Sequence[float] | None = None) -> HypervolumeInfo:
    history = hypervolume_history(data.records, data.directions, reference)
    note = (f"reference {tuple(reference)}" if reference is not None else
            "objectives scaled to [0, 1] by best/worst seen; reference 1.1 (max 1.1^d)")  # fmt: skip
    return HypervolumeInfo(tuple(history), data.objective_names, note)


def plot_hypervolume(info: HypervolumeInfo):
    import plotly.graph_objects as go

    title = "Hypervolume over completed trials"
    if not info.history:
        return empty(title, "no completed trial yet")
    xs, ys = zip(*info.history)
    fig = go.Figure(go.Scatter(x=xs, y=ys, mode="lines+markers", line=dict(shape="hv", color="#2ca02c"),
                               hovertemplate="%{x} completed: %{y:.4f}<extra></extra>"))
    fig.update_layout(title=dict(text=f"{title}<br><sup>{' × '.join(info.objectives)}; {info.note}</sup>"),
                      template="plotly_white", xaxis=dict(title="completed trials", rangemode="tozero"),
                      yaxis=dict(title="hypervolume", rangemode="tozero"), margin=dict(l=60, r=20, t=70, b=40))  # fmt: skip
    return fig


# -- layout picture ------------------------------------------------------------------------


class LayoutInfo(NamedTuple):
    rows: tuple[tuple[str, str], ...]  # (row label, layout string), top row first
    codes: tuple[str, ...]  # colour order
    study: str = ""  # the study's name, for the export command under the picture


def layout_info(data: StudyData, candidates: Sequence[int] | None = None, max_rows: int = 40) -> LayoutInfo:
    """Candidates' layouts: given trial numbers, else the recall-vs-KV front (else the objectives' front)."""
    if candidates is None:
        chosen = list(pareto_info(data.records, None, "kv_cache_bytes", "recall").front)
        if not chosen:
            chosen = list(front(data.records, data.directions, data.objective_names).front)
    else:
        by_number = {r.number: r for r in data.records}
        chosen = [by_number[n] for n in candidates if n in by_number]
    seen, rows = set(), []
    for r in chosen:
        if r.layout and r.layout not in seen:  # duplicate layouts (reused results) are one row
            seen.add(r.layout)
            recall = r.metric("recall")
            rows.append((f"#{r.number}" + (f" r={recall:.3f}" if recall is not None else ""), r.layout))
    codes = tuple(mixer_entry(name).code for name in MIXERS.names())
    return LayoutInfo(tuple(rows[:max_rows]), codes, data.name)


def plot_layouts(info: LayoutInfo):
    import plotly.graph_objects as go

    title = "Layouts of the front (rows) by layer"
    if not info.rows:
        return empty(title, "no candidate layouts yet")
    rows = [(label, layer_tokens(s)) for label, s in info.rows]  # one token a layer: "Z", or a window's "S1024"
    depth = max(len(toks) for _, toks in rows)
    index = {c: i for i, c in enumerate(info.codes)}
    z, text, hover = [], [], []
    for label, toks in rows:
        pad = [None] * (depth - len(toks))
        z.append([index.get(t[0]) for t in toks] + pad)
        text.append(toks + [""] * len(pad))
        hover.append([f"{label} layer {i}: {mixer_for_code(t[0]).name}{(' ' + t[1:]) if t[1:] else ''}"
                      for i, t in enumerate(toks)] + [""] * len(pad))
    n = len(info.codes)
    scale = []
    for i, c in enumerate(info.codes):  # piecewise-constant colours: one band per mixer code
        color = MIXER_COLORS.get(mixer_for_code(c).name, "#cccccc")
        scale += [[i / n, color], [(i + 1) / n, color]]
    fig = go.Figure(go.Heatmap(z=z, text=text, texttemplate="%{text}", hovertext=hover, hovertemplate="%{hovertext}<extra></extra>",
                               y=[label for label, _ in info.rows], colorscale=scale, zmin=-0.5, zmax=n - 0.5,
                               xgap=1, ygap=1, showscale=False))
    legend = " ".join(f"<span style='color:{MIXER_COLORS.get(mixer_for_code(c).name)}'>■</span>{c}={mixer_for_code(c).name}"
                      for c in info.codes)  # fmt: skip
    if info.study:  # where a row goes next: an fla config at scale (hlnas.analysis.export, docs/export.md)
        fig.add_annotation(text=f"export a row as an fla model config: hlnas export --study {info.study} --trial # "
                                "--scale paper-340m --out DIR (docs/export.md)",
                           xref="paper", yref="paper", x=0, y=-0.08, xanchor="left", yanchor="top", showarrow=False,
                           font=dict(size=11, color="#555555"))
    fig.update_layout(title=dict(text=f"{title}<br><sup>{legend}</sup>"), template="plotly_white",
                      xaxis=dict(title="layer", dtick=1 if depth <= 32 else None), yaxis=dict(autorange="reversed", type="category"),
                      margin=dict(l=110, r=20, t=70, b=70 if info.study else 40))  # fmt: skip
    return fig


# -- everything ----------------------------------------------------------------------------


def build_figures(data: StudyData) -> dict[str, object]:
    """Every hlnas figure of a study, keyed by :data:`FIGURE_IDS` (always all of them, empty ones say why)."""
    return {
        "hlnas_recall_vs_kv": plot_tradeoff(tradeoff_info(data, "recall")),
        "hlnas_loss_vs_kv": plot_tradeoff(tradeoff_info(data, "val_loss")),
        "hlnas_recall_vs_ratio": plot_ratio(ratio_info(data, "recall")),
        "hlnas_lm_vs_ratio": plot_ratio(ratio_info(data, _lm_metric(data))),
        "hlnas_ruler": plot_ruler(ruler_info(data)),
        "hlnas_hypervolume": plot_hypervolume(hypervolume_info(data)),
        "hlnas_layouts": plot_layouts(layout_info(data)),
        "hlnas_calibration": plot_calibration(calibration_info(data)),
        "hlnas_calibration_table": plot_calibration_table(calibration_info(data)),
        "hlnas_recall_curves": plot_curves(curves_info(data)),
        "hlnas_recall_vs_placement": plot_placement(placement_info(data)),
    }
