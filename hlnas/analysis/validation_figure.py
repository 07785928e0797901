"""``hlnas validate``'s figure: the proxy's value against the reference's for every cell in common, one colour per
mixer and one marker per ratio, each point's bar spanning its seeds; the title holds the proxy's rho beside the
attention share's alone and the partial rho. Split into an info (pure, tested) and a plotly figure, like
:mod:`hlnas.analysis.figures`; plotly is imported in the plot function only."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from hlnas.analysis.figure_style import MIXER_COLORS, mixer_rank, write_png
from hlnas.analysis.report import ReportError, find_chromium
from hlnas.analysis.validate import Validation
from hlnas.analysis.validation_report import rho_text

__all__ = ["RATIO_SYMBOLS", "ValidationPoint", "ValidationFigureInfo", "validation_figure_info", "plot_validation",
           "write_validation_figure", "FIGURE_NAME"]

FIGURE_NAME = "hlnas_validation"
RATIO_SYMBOLS = {"pure": "circle", "24:1": "square", "12:1": "diamond", "6:1": "triangle-up", "3:1": "star",
                 "full": "x"}  # fmt: skip
OTHER_SYMBOL = "cross"  # ratios outside the paper's grid


class ValidationPoint(NamedTuple):
    mixer: str
    ratio: str
    reference: float
    value: float  # mean over the cell's seeds
    low: float  # the lowest seed
    high: float  # the highest seed
    hover: str


class ValidationFigureInfo(NamedTuple):
    points: tuple[ValidationPoint, ...]  # by mixer, then attention share
    title: str
    x_title: str
    y_title: str
    saturated_from: float | None  # the saturation band's floor (best - tolerance); None when not saturated


def _hover(c, measure: str) -> str:
    lines = [f"<b>{c.name}</b>", f"reference {c.reference:.3f}", f"proxy {measure} {c.value:.3f}"]
    if c.raw is not None:
        lines.append(f"raw recall {c.raw:.3f}" + (f", no-recall {c.baseline:.3f}" if c.baseline is not None else ""))
    lines += [f"seed {r.seed}: {r.value:.3f}" for r in c.runs]
    if c.layout:
        lines.append(c.layout)
    return "<br>".join(lines)


def validation_figure_info(v: Validation) -> ValidationFigureInfo:
    """The cells in common as points, and a title naming every rho."""
    m = v.proxy.measure
    cells = sorted(v.shared, key=lambda c: (mixer_rank(c.mixer), c.mixer, c.share))
    points = tuple(ValidationPoint(c.mixer, c.ratio, c.reference, c.value, min(r.value for r in c.runs),
                                   max(r.value for r in c.runs), _hover(c, m)) for c in cells)
    bar = "" if v.state_rho is None else f"; share then state bytes {rho_text(v.state_rho)}"
    title = (f"Proxy {m} vs {v.reference.name} (n = {v.proxy_rho.n})<br><sup>rho {rho_text(v.proxy_rho)}; attention "
             f"share alone {rho_text(v.share_rho)}{bar}; partial rho, share held fixed {rho_text(v.partial_rho)}</sup>")
    s = v.saturation
    return ValidationFigureInfo(points, title, f"reference: {v.reference.name}", f"proxy: {m} (mean over seeds)",
                                s["best"].value - s["tolerance"] if s["saturated"] else None)


def plot_validation(info: ValidationFigureInfo):
    import plotly.graph_objects as go

    fig = go.Figure()
    for mixer in dict.fromkeys(p.mixer for p in info.points):
        pts = [p for p in info.points if p.mixer == mixer]
        fig.add_trace(go.Scatter(
            x=[p.reference for p in pts], y=[p.value for p in pts], mode="markers", name=mixer,
            marker={"color": MIXER_COLORS.get(mixer, "#7f7f7f"), "size": 12, "line": {"width": 1, "color": "#222"},
                    "symbol": [RATIO_SYMBOLS.get(p.ratio, OTHER_SYMBOL) for p in pts]},
            error_y={"type": "data", "symmetric": False, "array": [p.high - p.value for p in pts],
                     "arrayminus": [p.value - p.low for p in pts], "thickness": 1, "width": 3},
            hovertext=[p.hover for p in pts], hoverinfo="text"))
    for ratio in dict.fromkeys(p.ratio for p in info.points):  # a legend of the markers
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=f"ratio {ratio}", legendgroup="ratios",
                                 marker={"color": "#999", "size": 10, "symbol": RATIO_SYMBOLS.get(ratio, OTHER_SYMBOL)}))
    if info.saturated_from is not None:
        fig.add_hrect(y0=info.saturated_from, y1=max(p.value for p in info.points), fillcolor="#d62728", opacity=0.08,
                      line_width=0, annotation_text="saturated: tied with the best", annotation_position="bottom right")
    fig.update_layout(title=info.title, template="plotly_white", xaxis_title=info.x_title, yaxis_title=info.y_title,
                      legend={"title": "mixer / ratio"})
    return fig


def write_validation_figure(v: Validation, out_dir, *, png: bool = True, width: int = 1000, height: int = 650) -> list[Path]:
    """``hlnas_validation.html`` (plotly.js inlined, works offline) and, with ``png``, ``hlnas_validation.png`` in
    ``out_dir``; PNGs need a Chromium for kaleido (:class:`hlnas.analysis.report.ReportError` says so)."""
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ReportError(f"cannot create folder '{out}': {e.strerror or e}") from e
    if png and find_chromium() is None:  # before writing anything half
        raise ReportError("PNG export needs a Chromium/Chrome browser (kaleido drives one headless) and none was found; "
                          "install Chromium (Debian/Ubuntu: `apt-get install -y chromium`) or pass --no-png")
    fig = plot_validation(validation_figure_info(v))
    page = out / f"{FIGURE_NAME}.html"
    fig.write_html(page, include_plotlyjs=True, full_html=True)
    written = [page]
    if png:
        write_png(fig, out / f"{FIGURE_NAME}.png", width=width, height=height)
        written.append(out / f"{FIGURE_NAME}.png")
    return written
