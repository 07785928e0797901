"""Recall figures carry their no-recall baseline; the calibration verdict is drawn and tabled."""

from __future__ import annotations

import pytest

from hlnas.analysis.figures import (build_figures, calibration_info, plot_calibration, plot_calibration_table, plot_tradeoff,
                           tradeoff_info)
from hlnas.analysis.pareto import StudyData, TrialRecord
from hlnas.analysis.report import report_html


def _rec(n, layout, kv, raw, base=0.25):
    corrected = max(0.0, (raw - base) / (1 - base))
    return TrialRecord(number=n, state="complete", values=(corrected, float(kv)),
                       attrs={"layout": layout, "kv_cache_bytes": kv, "recall": corrected, "recall_raw": raw,
                              "recall_baseline": base, "recall_baseline_name": "copy_any", "recall_source": "mqar_acc",
                              "status": "ok", "mixers": ["hgrn"] * len(layout), "attention_layers": [i for i, c in enumerate(layout) if c == "A"]},
                       objective_names=("recall", "kv_cache"))


VERDICT = {"valid": False, "failures": ["the all-attention control AAAAAA reached 0.300 ..."], "kinds": ["control"],
           "config": {"control_min": 0.9, "hybrid_ratio": "3:1"},
           "rows": [{"role": "control", "mixer": "transformer", "layout": "AAAAAA", "recall": [0.3, 0.31], "mean": 0.305,
                     "spread": 0.01, "baseline": 0.25, "verdict": "FAIL"},
                    {"role": "pure", "mixer": "hgrn", "layout": "HHHHHH", "recall": [0.3, 0.32], "mean": 0.31, "spread": 0.02,
                     "baseline": 0.25, "verdict": "pass"},
                    {"role": "hybrid", "mixer": "hgrn", "layout": "HHAHHA", "recall": [0.9, 0.95], "mean": 0.925, "spread": 0.05,
                     "baseline": 0.25, "verdict": "pass"}]}


def data(calibration=None):
    recs = (_rec(0, "HHHHHH", 0, 0.30), _rec(1, "HHHHHA", 2**20, 0.98), _rec(2, "AAAAAA", 6 * 2**20, 0.99))
    attrs = {"hlnas_version": "x", "hlnas_kv_context": 4096, "hlnas_calibration": calibration or {"status": "valid", "verdict": VERDICT}}
    return StudyData("t", ("maximize", "minimize"), ("recall", "kv_cache"), recs, attrs)


def test_recall_vs_kv_draws_raw_recall_over_a_shaded_no_recall_band():
    info = tradeoff_info(data())
    assert info.baseline == 0.25 and info.baseline_name == "copy_any" and info.pareto.metrics == ("kv_cache_bytes", "recall_raw")
    fig = plot_tradeoff(info)
    band = [s for s in fig.layout.shapes if s.type == "rect"]
    assert len(band) == 1 and band[0].y0 == 0 and band[0].y1 == 0.25
    assert any("no recall: at or below copy_any 0.250" in (a.text or "") for a in fig.layout.annotations)
    assert "raw" in fig.layout.yaxis.title.text


def test_calibration_figure_and_report_table_show_the_verdict():
    info = calibration_info(data())
    assert info.status == "valid" and len(info.rows) == 3 and info.control_min == 0.9
    fig = plot_calibration(info)
    assert [t.name for t in fig.data] == ["pure", "hybrid"] and list(fig.data[1].y) == [0.925]
    figs = build_figures(data())
    assert "hlnas_calibration" in figs
    table = figs["hlnas_calibration_table"].data[0]
    assert list(table.cells.values[2]) == ["AAAAAA", "HHHHHH", "HHAHHA"] and list(table.cells.values[-1])[0] == "FAIL"
    html = report_html(data(), {})
    assert "<h2>Calibration</h2>" in html and "HHAHHA" in html and "INVALID: the all-attention control" in html
    skipped = plot_calibration(calibration_info(data({"status": "skipped"})))
    assert "--skip-calibration" in skipped.layout.annotations[0].text


def test_calibration_figure_draws_the_graded_ladder_and_the_report_its_per_mixer_checks():
    ladder = {"role": "ladder", "mixer": "hgrn", "layout": "HHHHHA", "ratio": "6:1", "recall": [0.6, 0.7], "mean": 0.65,
              "spread": 0.1, "baseline": 0.25, "verdict": "graded"}
    mixers = {"hgrn": {"pure_below": True, "pure_below_gap": 0.615, "graded": "rises", "falls": [],
                       "ladder": [{"ratio": "pure", "mean": 0.0, "spread": 0.01}, {"ratio": "6:1", "mean": 0.4, "spread": 0.02},
                                  {"ratio": "3:1", "mean": 0.7, "spread": 0.02}]}}
    verdict = {**VERDICT, "rows": [*VERDICT["rows"], ladder], "mixers": mixers,
               "config": {**VERDICT["config"], "graded_min_mixers": 1}}
    d = data({"status": "invalid", "verdict": verdict})
    fig = plot_calibration(calibration_info(d))
    assert [t.name for t in fig.data] == ["pure", "6:1", "hybrid"] and list(fig.data[1].y) == [0.65]
    html = report_html(d, {})
    assert "hgrn yes (+0.615)" in html and "hgrn: rises (pure 0.000" in html
    # an extra ratio (trained beside the calibration, not judged) is drawn in its place on the ladder, named so, and
    # its table row is not marked as a failure
    extra = {**ladder, "role": "extra", "layout": "HHHHHHHHHHHA", "ratio": "12:1", "mean": 0.3, "verdict": "reported"}
    d = data({"status": "invalid", "verdict": {**verdict, "rows": [*verdict["rows"], extra]}})
    fig = plot_calibration(calibration_info(d))
    assert [t.name for t in fig.data] == ["pure", "12:1 (not judged)", "6:1", "hybrid"] and list(fig.data[1].y) == [0.3]
    table = plot_calibration_table(calibration_info(d)).data[0]
    (colors,) = {tuple(c) for c in table.cells.fill.color}
    assert [c for c, row in zip(colors, table.cells.values[0]) if row in ("ladder", "extra")] == ["white", "white"]


def test_a_calibration_still_running_is_drawn_from_its_runs_so_far():
    """The dashboard of a calibration split over GPU calls shows the rows stored so far and whether it can still pass,
    instead of an empty 'running' panel."""
    from hlnas.space import space_from_dict

    space = space_from_dict({"name": "cal", "mixers": ["hgrn"], "ratios": ["pure", "3:1"], "transformer": True, "layers": 6,
                             "scale": {"preset": "proxy-tiny", "score": {"objectives": ["val_loss", "mqar"]}}})
    run = {"key": "control:transformer:s0", "role": "control", "mixer": "transformer", "layout": "AAAAAA", "seed": 0,
           "ratio": None, "status": "ok", "raw_train_length": 0.5, "baseline_train_length": 0.25}
    d = data({"status": "running", "runs": {run["key"]: run}})
    d = StudyData(d.name, d.directions, d.objective_names, d.records, {**d.user_attrs, "hlnas_space": space.to_dict()})
    info = calibration_info(d)
    assert info.status == "running" and [r["role"] for r in info.rows][:1] == ["control"] and info.rows[0]["recall"] == [0.5]
    assert info.failures[0] == "1 of 6 runs stored, no verdict yet"
    assert info.failures[1].startswith("CANNOT PASS any more: the all-attention control AAAAAA reached 0.500")
    fig = plot_calibration(info)
    assert "RUNNING: 1 of 6 runs stored" in fig.layout.title.text
    # closed by hand (hlnas calibrate --close): the same rows, and the reason instead of whether it can pass
    closed = {"status": "closed", "runs": {run["key"]: run}, "reason": "a probe ruled it out"}
    d = StudyData(d.name, d.directions, d.objective_names, d.records, {**d.user_attrs, "hlnas_calibration": closed})
    info = calibration_info(d)
    assert info.rows[0]["recall"] == [0.5] and info.failures[1] == "closed by hand: a probe ruled it out"
    assert "CLOSED: 1 of 6 runs stored, no verdict yet; closed by hand: a probe" in plot_calibration(info).layout.title.text


def _graded_data():
    """A study whose recall objective is the graded recall_auc (search_spaces/paper_grid_h200_lr.yaml): the trial
    values hold recall_auc; the user attrs the final corrected recall. The final accuracy ranks the layouts otherwise:
    HHHHHA and AAAAAA recall more at the end, but HHHHHH learned sooner."""
    def rec(n, layout, kv, raw, auc):
        r = _rec(n, layout, kv, raw, base=0.0156)
        return TrialRecord(number=r.number, state=r.state, values=(auc, float(kv)), attrs={**r.attrs, "recall_auc": auc},
                           objective_names=r.objective_names)

    recs = (rec(0, "HHHHHH", 0, 0.985, 0.91), rec(1, "HHHHHA", 2**20, 0.999, 0.90), rec(2, "AAAAAA", 6 * 2**20, 1.0, 0.84))
    attrs = {"hlnas_version": "x", "hlnas_kv_context": 4096,
             "hlnas_objectives": [{"name": "recall", "metric": "recall_auc", "direction": "maximize"},
                                  {"name": "kv_cache", "metric": "kv_cache_bytes", "direction": "minimize"}]}
    return StudyData("t", ("maximize", "minimize"), ("recall", "kv_cache"), recs, attrs)


def test_a_graded_recall_objective_is_drawn_and_named_as_itself_not_as_the_final_raw_recall():
    info = tradeoff_info(_graded_data())
    # the front of what the study optimises (recall_auc): the pure model alone, not the final accuracy's 3 points
    assert info.pareto.metrics == ("kv_cache_bytes", "recall") and [r.layout for r in info.pareto.front] == ["HHHHHH"]
    fig = plot_tradeoff(info)
    assert "recall learning AUC" in fig.layout.yaxis.title.text and "raw" not in fig.layout.yaxis.title.text
    assert list(fig.data[-1].y) == [0.91]  # the front trace
    # the no-recall level of a corrected measure is 0, named beside the raw baseline
    assert any("no recall: 0" in (a.text or "") and "copy_any 0.016" in (a.text or "") for a in fig.layout.annotations)
    figs = build_figures(_graded_data())
    assert "recall learning AUC" in figs["hlnas_recall_vs_ratio"].layout.yaxis.title.text
    # a study whose recall objective is the final corrected recall keeps the raw figure with its band
    assert tradeoff_info(data()).pareto.metrics == ("kv_cache_bytes", "recall_raw")


def test_the_reports_front_table_names_a_graded_recall_objective():
    html = report_html(_graded_data(), {})
    assert "<th>recall (recall_auc)</th>" in html and "<th>recall_raw</th>" in html
    assert "<th>recall</th>" in report_html(data(), {})


def test_write_png_retries_only_when_kaleidos_page_was_not_ready(monkeypatch, tmp_path):
    # kaleido now and then exports before its script is in the page (seen in analyse.sh on 2026-12-05): that error is
    # retried; any other is raised on the first try, and a page that never loads fails after PNG_TRIES
    import plotly.graph_objects as go
    import plotly.io as pio

    from hlnas.analysis import figure_style

    calls = []

    def flaky(fig, path, **kw):
        calls.append(path)
        if len(calls) < 2:
            raise RuntimeError("ReferenceError: kaleido_scopes is not defined")
        path.write_bytes(b"png")

    monkeypatch.setattr(pio, "write_image", flaky)
    figure_style.write_png(go.Figure(), tmp_path / "a.png", scale=2)
    assert len(calls) == 2 and (tmp_path / "a.png").read_bytes() == b"png"

    def broken(fig, path, **kw):
        calls.append(path)
        raise RuntimeError("Chromium failed to start")

    calls.clear()
    monkeypatch.setattr(pio, "write_image", broken)
    with pytest.raises(RuntimeError, match="Chromium"):
        figure_style.write_png(go.Figure(), tmp_path / "b.png")
    assert len(calls) == 1

    def never_ready(fig, path, **kw):
        calls.append(path)
        raise RuntimeError("kaleido_scopes is not defined")

    calls.clear()
    monkeypatch.setattr(pio, "write_image", never_ready)
    with pytest.raises(RuntimeError, match="kaleido_scopes"):
        figure_style.write_png(go.Figure(), tmp_path / "c.png")
    assert len(calls) == figure_style.PNG_TRIES
