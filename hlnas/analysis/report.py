"""A self-contained report of one study: ``report.html`` (plotly.js embedded, works offline) and a PNG per figure.

``report.html`` holds the study's settings, a table of its Pareto front (over the study's own objectives;
one row per distinct layout), the failed trials with their errors, and every figure of
:mod:`hlnas.analysis.figures`. PNGs are drawn by kaleido, which drives a headless Chromium: on Debian/Ubuntu
``apt-get install -y chromium``; without one, :class:`ReportError` says so (or pass ``png=False``).
"""

from __future__ import annotations

import datetime
import html
from pathlib import Path

from hlnas.errors import HlnasError
from hlnas.analysis.figure_style import write_png
from hlnas.analysis.figures import build_figures, format_metric
from hlnas.analysis.paper import mixer_and_ratio
from hlnas.analysis.pareto import StudyData, TrialRecord, front, load_study, study_data

__all__ = ["ReportError", "find_chromium", "write_report", "report_html"]

_FRONT_COLUMNS = ("recall", "recall_raw", "recall_baseline", "kv_cache_bytes", "val_loss", "lm_acc", "params")
_INSTALL = "install Chromium (Debian/Ubuntu: `apt-get install -y chromium`) or call write_report(..., png=False)"


class ReportError(HlnasError, RuntimeError):
    """The report cannot be written as asked (no browser for PNGs, output folder not writable)."""


def find_chromium() -> str | None:
    """The Chromium/Chrome kaleido will use (``BROWSER_PATH``, ``PATH``, usual install places), or None."""
    try:
        from choreographer.browsers.chromium import Chromium

        return Chromium.find_browser(skip_local=False)
    except ImportError:  # kaleido < 1 has no choreographer; look on PATH ourselves
        import shutil

        return next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome", "chrome"))), None)


def _cell(name: str, rec: TrialRecord) -> str:
    return html.escape(format_metric(name, rec.metric(name)))


def _front_table(data: StudyData) -> str:
    info = front(data.records, data.directions, data.objective_names)
    columns = [c for c in _FRONT_COLUMNS if any(r.metric(c) is not None for r in info.front)]
    graded = data.objective_metric("recall")  # the recall objective's measure (recall_auc, graded), when another
    names = [f"recall ({graded})" if c == "recall" and graded != "recall" else c for c in columns]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in ("trial", "layout", "mixer", "ratio", *names))
    rows, seen = [], set()
    for r in sorted(info.front, key=lambda r: (r.metric("kv_cache_bytes") or 0, r.number)):
        if r.layout in seen:  # a duplicate layout reused an earlier result: one row
            continue
        seen.add(r.layout)
        mixer, ratio = mixer_and_ratio(r)
        cells = [f"#{r.number}", f"<code>{html.escape(r.layout)}</code>", html.escape(mixer or "mixed"), html.escape(ratio or "")]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells + [_cell(c, r) for c in columns]) + "</tr>")
    if not rows:
        return "<p>No feasible completed trial yet: the front is empty.</p>"
    objectives = ", ".join(f"{n} ({d})" for n, d in zip(data.objective_names, data.directions))
    return (f"<p>Front over the study's objectives: {html.escape(objectives)}. "
            f"{len(info.dominated)} dominated, {len(info.infeasible)} infeasible, {len(info.unscored)} without values.</p>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>")  # fmt: skip


def _failed_table(data: StudyData) -> str:
    failed = [r for r in data.records if r.status == "failed"]
    if not failed:
        return "<p>No failed trial.</p>"
    rows = "".join(
        f"<tr><td>#{r.number}</td><td><code>{html.escape(r.layout)}</code></td><td>{html.escape(str(r.attrs.get('error_kind') or ''))}</td>"
        f"<td>{html.escape(str(r.attrs.get('error') or ''))[:300]}</td></tr>"
        for r in failed
    )
    return f"<table><thead><tr><th>trial</th><th>layout</th><th>kind</th><th>error</th></tr></thead><tbody>{rows}</tbody></table>"


def _calibration_table(data: StudyData) -> str:
    cal = data.user_attrs.get("hlnas_calibration") or {}
    verdict = cal.get("verdict")
    if not verdict:
        return f"<p>Calibration: {html.escape(str(cal.get('status', 'not run (a study from before calibration)')))}.</p>"
    from hlnas.calibration.protocol import TABLE_COLUMNS, hop_lines, mixer_lines, summary, table_cells

    head = "".join(f"<th>{html.escape(c)}</th>" for c in TABLE_COLUMNS)
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>" for cells in table_cells(verdict))
    state = summary(verdict)
    checks = "\n".join(mixer_lines(verdict) + hop_lines(verdict))  # per mixer checks; VT: accuracy by hops
    checks = f"<pre>{html.escape(checks)}</pre>" if checks else ""
    return (f"<p>The protocol is {html.escape(state)}.</p><table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
            f"{checks}")


_CSS = """body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;font-size:13px}th{background:#f3f3f3}
code{font-size:12px}.fig{margin:1.5em 0}.note{color:#666;font-size:13px}"""


def report_html(data: StudyData, figures: dict) -> str:
    """The whole report as one HTML string (plotly.js inlined once, figures after it)."""
    import plotly.io as pio
    from plotly.offline import get_plotlyjs

    a = data.user_attrs
    settings = {
        "objectives": ", ".join(f"{n} ({d})" for n, d in zip(data.objective_names, data.directions)),
        "preset": a.get("hlnas_preset"), "KV context (tokens)": a.get("hlnas_kv_context"),
        "space hash": a.get("hlnas_space_hash"), "hlnas version": a.get("hlnas_version"),
        "trials": f"{data.count('ok')} ok, {data.count('failed')} failed, {data.count('infeasible')} infeasible, "
                  f"{data.count('pending')} running or waiting",
        "paper grid": "yes: the paper's published numbers are overlaid, marked 'paper (arXiv 2507.06457, Table N)'"
                      if data.paper_grid else "no",
    }  # fmt: skip
    rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in settings.items() if v is not None)
    figs = "".join(
        f'<div class="fig">{pio.to_html(fig, full_html=False, include_plotlyjs=False, div_id=fid, default_height="560px")}</div>'
        for fid, fig in figures.items()
    )
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>hlnas report: {html.escape(data.name)}</title>
<style>{_CSS}</style><script type="text/javascript">{get_plotlyjs()}</script></head>
<body><h1>hlnas study <code>{html.escape(data.name)}</code></h1><p class="note">written {stamp}</p>
<table>{rows}</table>
<h2>Pareto front</h2>{_front_table(data)}
<p class="note">recall = (raw - b) / (1 - b), clipped at 0: raw recall corrected for b, the strongest no-recall
baseline (what a model with no key-to-value association scores) on the same test instances.</p>
<h2>Calibration</h2>{_calibration_table(data)}
<h2>Failed trials</h2>{_failed_table(data)}
<h2>Figures</h2>{figs}
<p class="note">Paper overlays compare shapes only: the paper trains 340M/1.3B models on 20B/100B tokens.
Its Table 6 LM numbers cannot be reproduced from its Tables 2/3 and are a relative ranking only.</p>
</body></html>
"""


def write_report(storage_url, study_name: str, out_dir, *, png: bool = True, width: int = 1000, height: int = 600) -> list[Path]:
    """Write ``report.html`` and (``png=True``) ``<figure id>.png`` for each figure into ``out_dir``.

    Returns the written paths, the HTML first. Errors name what is missing: the study (listing the
    available ones), the storage (allowed schemes) or Chromium for the PNGs.
    """
    study = load_study(storage_url, study_name)
    data = study_data(study)
    if not data.is_hlnas:
        raise ReportError(f"study '{study_name}' was not created by hlnas (no hlnas_version attribute): its trials lack "
                          "the layouts and metrics a report shows")
    figures = build_figures(data)
    out = Path(out_dir)
    from hlnas.outputs import missing_dirs, remove_dirs, remove_quietly, write_atomic

    made = missing_dirs(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ReportError(f"cannot create report folder '{out}': {e.strerror or e}") from e
    if png and find_chromium() is None:  # fail before writing anything half
        raise ReportError(f"PNG export needs a Chromium/Chrome browser (kaleido drives one headless) and none was found; {_INSTALL}")
    from hlnas.errors import DiskFull, no_room

    page = out / "report.html"
    paths = [out / f"{fid}.png" for fid in figures] if png else []
    try:
        write_atomic(page, report_html(data, figures))  # whole or not at all (a full disk: DiskFull, no partial page)
        if png:
            write_png(list(figures.values()), paths, width=width, height=height)
    except BaseException as e:
        remove_quietly(page, *paths)  # a report is its page and its figures, or nothing
        remove_dirs(made)
        full = no_room(e)
        if full is not None and not isinstance(e, DiskFull):
            raise DiskFull(next((p for p in paths if str(p) in str(e)), out), full) from None
        if isinstance(e, RuntimeError) and ("chrome" in str(e).lower() or "browser" in str(e).lower()):
            raise ReportError(f"PNG export failed to start Chromium: {e}; {_INSTALL}") from e
        raise
    return [page, *paths]
