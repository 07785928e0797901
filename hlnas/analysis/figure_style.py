"""What every hlnas figure shares: mixer colours, metric titles and units (from :mod:`hlnas.metrics`), hover text, and
the empty figure that says why it is empty."""

from __future__ import annotations

import hlnas.metrics as metric_table
from hlnas.analysis.paper import mixer_and_ratio
from hlnas.analysis.pareto import StudyData, TrialRecord

__all__ = ["MIXER_COLORS", "mixer_rank", "metric_titles", "format_metric", "hover", "empty", "recall_baseline", "write_png"]

MIXER_COLORS = {
    "attention": "#d62728", "transformer": "#444444", "hgrn": "#1f77b4", "hgrn2": "#17becf", "retnet": "#9467bd",
    "gla": "#2ca02c", "deltanet": "#ff7f0e", "gated_deltanet": "#8c564b", "mamba2": "#e377c2", "kda": "#bcbd22",
    "rwkv7": "#393b79", "swa": "#f7b6d2", "average": "#7f7f7f",
}  # fmt: skip


def mixer_rank(name: str) -> int:
    """Where a mixer sorts in figures and legends: :data:`MIXER_COLORS`' order, unknown ones after."""
    order = list(MIXER_COLORS)
    return order.index(name) if name in order else len(order)


_HOVER_METRICS = ("recall", "recall_raw", "recall_baseline", "kv_cache_bytes", "val_loss", "mqar_acc", "lm_acc", "params", "state_bytes",
                  "flops_per_token", "tokens_per_s", "train_wall_s")  # fmt: skip
_TITLES = {name: m.title for name, m in metric_table.METRICS.items()}  # hlnas.metrics: one table of titles
_SOURCE_TITLES = {"mqar_acc": "MQAR acc", "mqar_mixed_acc": "mixed-in MQAR acc", "ruler_avg": "RULER avg"}


def metric_titles(data: StudyData) -> dict[str, str]:
    """Axis names; ``recall`` says which measure it is (the study loop falls back to MQAR without RULER)."""
    ok = [r for r in data.records if r.status == "ok" and r.metric("recall") is not None]
    graded = data.objective_metric("recall")
    if graded != "recall":  # the objective named recall is another measure (recall_auc): its values, its name
        title = _TITLES.get(graded, graded)
        return {**_TITLES, "recall": f"{title} ({graded}, corrected)"}
    sources = {r.attrs.get("recall_source") for r in ok} - {None}
    if len(sources) == 1:
        name = _SOURCE_TITLES.get(next(iter(sources)), next(iter(sources)))
        return {**_TITLES, "recall": f"recall above the no-recall baseline ({name}, corrected)",
                "recall_raw": f"recall ({name}, raw)"}
    if any(isinstance(r.attrs.get("ruler"), dict) for r in ok):
        recall = "recall (RULER avg)"
    elif ok and all(r.metric("recall") == r.metric("mqar_acc") for r in ok):
        recall = "recall (MQAR acc)"
    else:
        recall = "recall"
    return {**_TITLES, "recall": recall}


def recall_baseline(data: StudyData) -> tuple[float | None, str | None]:
    """The study's strongest no-recall baseline (the same test instances for every trial: one value)."""
    got = [(r.metric("recall_baseline"), r.attrs.get("recall_baseline_name")) for r in data.records
           if r.metric("recall_baseline") is not None]
    if not got:
        return None, None
    return max(got, key=lambda t: t[0])


def format_metric(name: str, value) -> str:
    if value is None:
        return "n/a"
    unit = metric_table.METRICS[name].unit if name in metric_table.METRICS else ("bytes" if name.endswith("_bytes") else "")
    if unit == "bytes":
        return metric_table.bytes_text(value)
    if unit == "count":
        return f"{value / 1e6:.2f}M"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def hover(rec: TrialRecord) -> str:
    mixer, ratio = mixer_and_ratio(rec)
    lines = [f"<b>{rec.layout or '?'}</b>", f"trial #{rec.number} · {mixer or 'mixed'} {ratio or ''} · {rec.status}"]
    if rec.attrs.get("reused_from") is not None:
        lines.append(f"reused result of trial #{rec.attrs['reused_from']}")
    lines += [f"{m}: {format_metric(m, rec.metric(m))}" for m in _HOVER_METRICS if rec.metric(m) is not None]
    return "<br>".join(lines)


def empty(title: str, message: str):
    import plotly.graph_objects as go

    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
    fig.update_layout(title=title, template="plotly_white", xaxis_visible=False, yaxis_visible=False)
    return fig


# kaleido >= 1 loads its plotting script into a fresh Chromium tab per export; now and then the export runs before the
# script is in, and fails with "ReferenceError: kaleido_scopes is not defined" (seen in an analyse.sh run: the same
# figure wrote on the next try). That is the one failure worth retrying; any other error is the figure's or the
# browser's and is raised at once.
_PAGE_NOT_READY = "kaleido_scopes is not defined"
PNG_TRIES = 3


def write_png(figs, paths, **kwargs) -> None:
    """Write one plotly figure (or a list) to PNG through kaleido, retrying the export when kaleido's page was not
    ready (``PNG_TRIES`` in all). ``kwargs`` go to ``plotly.io.write_image(s)`` (width, height, scale)."""
    import plotly.io as pio

    many = isinstance(figs, (list, tuple))
    for attempt in range(1, PNG_TRIES + 1):
        try:
            if many:
                pio.write_images(list(figs), list(paths), **kwargs)
            else:
                pio.write_image(figs, paths, **kwargs)
            return
        except RuntimeError as e:
            if _PAGE_NOT_READY not in str(e) or attempt == PNG_TRIES:
                raise
