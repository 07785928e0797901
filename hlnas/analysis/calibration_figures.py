"""The calibration's figures (its verdict per control, its table) and the recall runs' learning curves, each split into
an info (tested) and a plotly figure, like :mod:`hlnas.analysis.figures`."""

from __future__ import annotations

from typing import NamedTuple

from hlnas.analysis.figure_style import MIXER_COLORS, empty
from hlnas.analysis.paper import mixer_and_ratio
from hlnas.analysis.pareto import StudyData, pareto_info
from hlnas.search.rungs import checks as rung_checks

__all__ = ["CalibrationInfo", "calibration_info", "plot_calibration", "plot_calibration_table", "CurveLine",
           "CurvesInfo", "curves_info", "plot_curves", "CURVE_METRICS"]


# -- calibration ---------------------------------------------------------------------------


class CalibrationInfo(NamedTuple):
    status: str  # valid | invalid | running | skipped | not needed | absent
    rows: tuple[dict, ...]  # calibrate.verdict rows
    control_min: float | None
    failures: tuple[str, ...]


def calibration_info(data: StudyData) -> CalibrationInfo:
    """The stored verdict; for a calibration still running (split over GPU calls), the rows of its runs so far, and as
    its 'failures' how many runs are stored and whether it can still pass (:func:`hlnas.calibration.protocol.progress`); for one
    closed by hand (``hlnas calibrate --close``), its rows so far and the reason."""
    cal = data.user_attrs.get("hlnas_calibration") or {}
    verdict = cal.get("verdict") or {}
    failures = tuple(verdict.get("failures") or ())
    if cal.get("status") in ("running", "closed") and cal.get("runs") and "hlnas_space" in data.user_attrs:
        import hlnas.calibration.protocol as calib

        pr = calib.progress(data.stored_space, cal["runs"])
        verdict = pr["verdict"]
        failures = (f"{pr['stored']} of {pr['planned']} runs stored, no verdict yet",
                    f"closed by hand: {cal.get('reason')}" if cal["status"] == "closed"  # hlnas calibrate --close
                    else f"CANNOT PASS any more: {pr['cannot_pass']}" if pr["cannot_pass"] else "can still pass")
    return CalibrationInfo(cal.get("status", "absent"), tuple(verdict.get("rows") or ()),
                           (verdict.get("config") or {}).get("control_min"), failures)


def _calibration_subtitle(info: CalibrationInfo) -> str:
    return "valid" if info.status == "valid" else f"{info.status.upper()}: " + "; ".join(info.failures)[:300]


def plot_calibration(info: CalibrationInfo):
    """The protocol's controls: raw recall per mixer, pure and hybrid side by side, the all-attention control
    and the no-recall baseline as lines, seed spread as error bars."""
    import plotly.graph_objects as go

    title = "recall protocol calibration"
    if not info.rows:
        return empty(title, f"calibration: {info.status}" + (" (search run with --skip-calibration)" if info.status == "skipped" else ""))
    fig = go.Figure()
    # pure, then the graded ladder's and the extra ratios, then the hybrid: attention share rising left to right in each
    # group (an extra ratio is trained beside the calibration and not judged: its name says so)
    ladder = sorted({(r["ratio"], r["role"]) for r in info.rows if r["role"] in ("ladder", "extra") and r.get("ratio")},
                    key=lambda q: -int(q[0].split(":")[0]))
    palette = ("#ff9896", "#f4a582", "#e377c2", "#c5b0d5", "#fdd0a2")
    groups = [("pure", "pure", "#7f7f7f")] + [(f"{role}:{q}", q if role == "ladder" else f"{q} (not judged)", c)
                                              for (q, role), c in zip(ladder, palette)]
    groups.append(("hybrid", "hybrid", "#d62728"))
    for group, name, color in groups:
        role, _, ratio = group.partition(":")
        rows = [r for r in info.rows if r["role"] == role and r.get("mean") is not None and (not ratio or r.get("ratio") == ratio)]
        if rows:
            fig.add_trace(go.Bar(x=[r["mixer"] for r in rows], y=[r["mean"] for r in rows], name=name, marker_color=color,
                                 error_y=dict(type="data", array=[r["spread"] / 2 for r in rows], visible=True),
                                 text=[r["layout"] for r in rows], textposition="none",  # the layout on hover only
                                 hovertemplate="%{text}: %{y:.3f}<extra>" + name + "</extra>"))
    control = next((r for r in info.rows if r["role"] == "control" and r.get("mean") is not None), None)
    if control is not None:
        fig.add_hline(y=control["mean"], line=dict(color="#444444", dash="dash"),
                      annotation_text=f"all-attention control {control['mean']:.3f}", annotation_position="top right")
    if info.control_min is not None:
        fig.add_hline(y=info.control_min, line=dict(color="#2ca02c", dash="dot"),
                      annotation_text=f"control must reach {info.control_min}", annotation_position="bottom right")
    bases = [r["baseline"] for r in info.rows if r.get("baseline") is not None]
    if bases:
        fig.add_hrect(y0=0, y1=max(bases), fillcolor="#999999", opacity=0.18, line_width=0, layer="below",
                      annotation_text=f"no recall (baseline {max(bases):.3f})", annotation_position="top left")
    sub = _calibration_subtitle(info)
    fig.update_layout(title=dict(text=f"{title}<br><sup>{sub}</sup>"), template="plotly_white", barmode="group",
                      yaxis=dict(title="raw recall at the training length", range=[0, 1.05]), xaxis=dict(title="mixer"),
                      legend=dict(orientation="h", y=-0.2), margin=dict(l=60, r=20, t=70, b=40))
    return fig


def plot_calibration_table(info: CalibrationInfo):
    """The verdict table itself (what ``hlnas calibrate`` prints), for the dashboard."""
    import plotly.graph_objects as go

    title = "recall protocol calibration: the controls"
    if not info.rows:
        return empty(title, f"calibration: {info.status}")
    from hlnas.calibration.protocol import TABLE_COLUMNS as cols, table_cells

    rows = table_cells({"rows": info.rows})
    colors = [["white" if row[-1] in ("pass", "graded", "reported") else "#fde0e0" for row in rows]] * len(cols)
    fig = go.Figure(go.Table(header=dict(values=list(cols), fill_color="#f3f3f3", align="left"),
                             cells=dict(values=[list(c) for c in zip(*rows)], fill_color=colors, align="left")))
    sub = _calibration_subtitle(info)
    fig.update_layout(title=dict(text=f"{title}<br><sup>{sub}</sup>"), margin=dict(l=20, r=20, t=70, b=20))
    return fig


# -- recall curves (the intermediate results per check) -------------------------------------


#: the per-check values a curve can draw (keys of each ``hlnas_checks`` entry)
CURVE_METRICS = {"recall": "recall above the no-recall baseline (validation, corrected)",
                 "recall_auc": "graded recall (area under the corrected curve so far)"}


class CurveLine(NamedTuple):
    number: int
    layout: str
    mixer: str | None  # the trial's linear mixer, "transformer", or None for mixed layouts
    status: str  # ok | stopped | failed | infeasible | pending (paused at a rung or running)
    on_front: bool  # on the recall-vs-KV front of the complete trials
    steps: tuple[int, ...]
    values: tuple[float, ...]


class CurvesInfo(NamedTuple):
    metric: str
    lines: tuple[CurveLine, ...]  # by trial number
    rungs: tuple[int, ...]  # the rung scheduler's step budgets below the top (none without rungs)


def curves_info(data: StudyData, metric: str = "recall") -> CurvesInfo:
    """A line per trial with recall checks: user attr ``hlnas_checks``, else :func:`hlnas.search.rungs.checks` of its stored
    recall run (the calibration's trials store no checks); a reused result is its source trial's line, drawn once."""
    if metric not in CURVE_METRICS:
        raise ValueError(f"metric {metric!r} is not allowed; allowed: {', '.join(CURVE_METRICS)}")
    front = {r.number for r in pareto_info(data.records, None, "kv_cache_bytes", "recall").front}
    lines, rungs = [], set()
    for r in data.records:
        ladder = (r.attrs.get("hlnas_rung") or {}).get("ladder") or []
        rungs.update(ladder[:-1])
        checks = r.attrs.get("hlnas_checks")
        if checks is None:  # stored without them (the calibration's trials): from its recall run, as the loop does
            checks = rung_checks(r.attrs) or None
        if r.attrs.get("reused_from") is not None or not isinstance(checks, list):
            continue
        pts = [(int(c["step"]), float(c[metric])) for c in checks if isinstance(c.get(metric), (int, float))]
        if pts:
            steps, values = zip(*pts)
            lines.append(CurveLine(r.number, r.layout, mixer_and_ratio(r)[0], r.status, r.number in front, steps, values))
    return CurvesInfo(metric, tuple(lines), tuple(sorted(rungs)))


def plot_curves(info: CurvesInfo):
    import plotly.graph_objects as go

    title = "Recall during training, per trial (every check of its fresh recall model)"
    if not info.lines:
        return empty(title, "no trial has stored its recall checks yet")
    dash = {"stopped": "dot", "pending": "dash"}
    fig = go.Figure()
    for ln in info.lines:
        color = "#bbbbbb" if ln.status in ("failed", "infeasible") else MIXER_COLORS.get(ln.mixer or "", "#7f7f7f")
        name = f"#{ln.number} {ln.layout}" + ("" if ln.status == "ok" else f" ({ln.status})")
        fig.add_trace(go.Scatter(
            x=ln.steps, y=ln.values, mode="lines+markers", name=name, legendgroup=ln.mixer or "mixed",
            legendgrouptitle_text=ln.mixer or "mixed", opacity=1.0 if ln.on_front else 0.55,
            line=dict(color=color, width=3.5 if ln.on_front else 1.5, dash=dash.get(ln.status, "solid")),
            marker=dict(size=5 if ln.on_front else 3),
            hovertemplate=f"<b>{ln.layout}</b> trial #{ln.number} ({ln.status}{', on the front' if ln.on_front else ''})"
                          "<br>step %{x}: %{y:.3f}<extra></extra>"))
    for s in info.rungs:
        fig.add_vline(x=s, line=dict(color="#999999", dash="dot", width=1), annotation_text=f"rung {s}",
                      annotation_position="top", annotation_font=dict(size=9, color="#777777"))
    stopped = sum(ln.status == "stopped" for ln in info.lines)
    sub = (f"{len(info.lines)} trials; thick: on the recall-vs-KV front"
           + (f"; dotted: stopped at a rung ({stopped})" if stopped else "") + "; dashed: paused or running; 0 = no recall")
    fig.update_layout(title=dict(text=f"{title}<br><sup>{sub}</sup>"), template="plotly_white",
                      xaxis=dict(title="recall-model training steps", rangemode="tozero"),
                      yaxis=dict(title=CURVE_METRICS[info.metric], range=[-0.02, 1.05]),
                      legend=dict(groupclick="toggleitem", font=dict(size=9)), margin=dict(l=60, r=20, t=70, b=40))
    return fig
