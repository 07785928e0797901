"""Figures (info builders and plots), attaching them to a study, the served dashboard in a real headless
Chromium (DevTools protocol through choreographer, which kaleido already installs), live refresh, and the
error messages for bad input."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import socket
import threading
import time
import urllib.request
from pathlib import Path

import optuna
import pytest

from hlnas.analysis import paper
from hlnas.errors import HlnasError
from hlnas.analysis.dashboard import (
    PortInUseError, StorageError, UnknownStudyError, attach_figures, load_study, open_storage, start_server,
)  # fmt: skip
from hlnas.analysis.figures import (
    FIGURE_IDS, build_figures, curves_info, layout_info, metric_titles, plot_curves, plot_layouts, plot_ratio, plot_tradeoff,
    ratio_info, ruler_info, tradeoff_info,
)  # fmt: skip
from hlnas.model.layout import build_layout
from hlnas.analysis.pareto import pareto_info, study_data
from hlnas.analysis.report import find_chromium
from tests.studies import EMPTY_IN_PAPER_GRID, add_trial, make_study, trial_attrs

REPO = Path(__file__).resolve().parents[1]


def _api(server, path):
    with urllib.request.urlopen(server.url.replace("/dashboard/", "/api/") + path, timeout=10) as r:
        return json.load(r)


# -- figure infos --------------------------------------------------------------------------


def test_ratio_info_orders_ratios_like_the_paper_and_overlays_table_7():
    study = make_study(ratios=("3:1", "pure", "12:1", "24:1", "6:1", "2:1"), paper_grid=False)
    info = ratio_info(study_data(study), "recall")
    assert info.ratios == ("pure", "24:1", "12:1", "6:1", "3:1", "2:1")  # by attention share, not as given
    assert set(info.lines) == {"gla", "deltanet", "hgrn2"} and all(n == (1,) * 6 for n in info.counts.values())
    t = [r for r in study_data(study).records if r.attrs.get("ratio") == "transformer"][0]
    assert info.transformer == t.metric("recall")
    assert not info.paper_lines and info.paper_label is None  # not a paper-grid study: no overlay

    grid = ratio_info(study_data(make_study()), "recall")
    assert grid.ratios == ("pure", "24:1", "12:1", "6:1", "3:1")
    assert grid.paper_label == "paper (arXiv 2507.06457, Table 7)" and not grid.paper_secondary
    assert grid.paper_lines["gla"] == tuple(paper.recall_by_ratio()["gla"][r] for r in grid.ratios)
    assert "hgrn" not in grid.paper_lines  # only mixers the study ran
    assert grid.paper_transformer == 0.423

    partial = ratio_info(study_data(make_study(ratios=("pure", "6:1", "3:1"))), "recall")
    assert partial.ratios == ("pure", "24:1", "12:1", "6:1", "3:1")  # a paper grid keeps the paper's axis
    traces = {tr.name: tr for tr in plot_ratio(partial).data}
    assert list(traces["gla"].y)[1:3] == [None, None] and traces["gla"].connectgaps is False  # untrained: a gap
    assert None not in traces[f"gla: {partial.paper_label}"].y

    lm = ratio_info(study_data(make_study()), "val_loss")
    assert lm.paper_secondary and "Table 6" in lm.paper_label and "relative ranking" in lm.paper_label
    fig = plot_ratio(lm)
    assert fig.layout.yaxis.autorange == "reversed" and "Table 6" in fig.layout.yaxis2.title.text
    assert [tr.yaxis for tr in fig.data if "paper" in tr.name] == ["y2"] * 3


def test_tradeoff_figure_highlights_front_labels_points_and_marks_the_paper():
    data = study_data(make_study())
    info = tradeoff_info(data, "recall")
    assert info.pareto == pareto_info(data.records)
    assert len(info.paper_points) == len(info.pareto.front) + len(info.pareto.dominated)  # every paper cell has a point
    fig = plot_tradeoff(info)
    by_name = {tr.name: tr for tr in fig.data}
    front = by_name["Pareto front"]
    assert list(front.text) == [r.layout for r in info.pareto.front] and "lines" in front.mode
    assert front.line.shape == "hv"  # attainment steps
    assert by_name["dominated"].opacity < 0.5 and len(by_name["dominated"].x) == len(info.pareto.dominated)
    assert "recall: " in front.hovertext[0] and "kv_cache_bytes: " in front.hovertext[0]
    assert {"paper (arXiv 2507.06457, Table 7)", "paper (arXiv 2507.06457, Table 5)"} <= set(by_name)
    assert "1 infeasible, 1 failed" in fig.layout.title.text
    # not a paper-grid study: no paper trace at all
    plain = plot_tradeoff(tradeoff_info(study_data(make_study(paper_grid=False)), "recall"))
    assert not [tr for tr in plain.data if "paper" in tr.name]


def test_ruler_and_layout_infos():
    data = study_data(make_study())
    front = pareto_info(data.records).front
    info = ruler_info(data)
    assert [label.split()[0] for label, _ in info.bars] == [f"#{r.number}" for r in front]
    assert info.columns == paper.RULER_GROUP_ORDER and info.paper_label == "paper (arXiv 2507.06457, Table 5)"
    assert len(info.paper_bars) == 5 and info.paper_bars[-1][0] == "Transformer"
    tasks = ruler_info(data, candidates=[front[0].number], level="tasks")
    assert tasks.columns == ("niah_single_1", "vt") and len(tasks.bars) == 1 and not tasks.paper_bars
    with pytest.raises(ValueError, match="allowed: groups, tasks"):
        ruler_info(data, level="task")
    with pytest.raises(ValueError, match="trial 999 is not in study"):
        ruler_info(data, candidates=[999])

    lay = layout_info(data)
    assert [s for _, s in lay.rows] == [r.layout for r in front]
    fig = plot_layouts(lay)
    z = fig.data[0].z
    first_hybrid = next(i for i, (_, s) in enumerate(lay.rows) if "A" in s and set(s) != {"A"})
    assert [c for c, s in zip(z[first_hybrid], lay.rows[first_hybrid][1]) if s == "A"] == [0] * lay.rows[first_hybrid][1].count("A")


def test_recall_axis_names_its_measure():
    assert metric_titles(study_data(make_study()))["recall"] == "recall (RULER avg)"
    study = optuna.create_study(directions=["maximize", "minimize"])
    study.set_user_attr("hlnas_objectives", [{"name": "recall", "metric": "recall", "direction": "maximize"},
                                             {"name": "kv_cache_bytes", "metric": "kv_cache_bytes", "direction": "minimize"}])
    add_trial(study, trial_attrs("gla", "6:1", ruler=False))  # no RULER: the loop's recall is MQAR accuracy
    data = study_data(study)
    assert metric_titles(data)["recall"] == "recall (MQAR acc)"
    assert plot_tradeoff(tradeoff_info(data)).layout.yaxis.title.text.startswith("recall (MQAR acc)")


def test_recall_curves_draw_each_trials_checks_with_its_status_and_the_rungs():
    def checks(values):  # the hlnas_checks format (hlnas.search.rungs.checks)
        return [{"step": 100 * (i + 1), "val_acc": 0.25 + 0.75 * v, "recall": v, "recall_auc": v / 2, "loss": 1.0}
                for i, v in enumerate(values)]

    study = make_study(mixers=(), transformer=False, failed=False, infeasible=False)
    ladder = {"ladder": [300, 900, 1200], "at": 2, "next": 2, "state": "complete", "values": {}}
    for i, (mixer, ratio) in enumerate((("gla", "pure"), ("gla", "3:1"), ("transformer", None))):
        add_trial(study, trial_attrs(mixer, ratio, hlnas_checks=checks([0.0, 0.1 * i, 0.3 * i, 0.4 * i]), hlnas_rung=ladder))
    add_trial(study, trial_attrs("gla", "6:1", status="stopped", recall=None, hlnas_checks=checks([0.0, 0.05, 0.1]),
                                 hlnas_rung={**ladder, "state": "stopped", "at": 0}), state=optuna.trial.TrialState.PRUNED)
    add_trial(study, trial_attrs("gla", "3:1", reused_from=1, hlnas_checks=checks([0.0, 0.1, 0.3, 0.4])))
    add_trial(study, trial_attrs("gla", "12:1", hlnas_checks=None))  # no checks and no recall run: no line
    run = {"lr": 1e-3, "curve": [[100, 0.25, 2.0], [200, 1.0, 0.5]]}  # a calibration trial: its run, no checks
    add_trial(study, trial_attrs("gla", "24:1", hlnas_checks=None, mqar={"runs": [run]}, mqar_lr=1e-3, mqar_val_baseline=0.25))
    info = curves_info(study_data(study))
    assert [ln.number for ln in info.lines] == [0, 1, 2, 3, 6]  # the reused result is its source's line, drawn once
    assert info.lines[-1].steps == (100, 200) and info.lines[-1].values == (0.0, 1.0)
    assert info.rungs == (300, 900)  # the top (1200) is the budget, not a rung
    by = {ln.number: ln for ln in info.lines}
    assert by[3].status == "stopped" and by[3].steps == (100, 200, 300) and by[3].values == (0.0, 0.05, 0.1)
    assert by[1].on_front and not by[3].on_front and by[1].mixer == "gla"  # gla 3:1
    assert curves_info(study_data(study), "recall_auc").lines[1].values == tuple(v / 2 for v in by[1].values)
    fig = plot_curves(info)
    assert len(fig.data) == 5 and {s.x0 for s in fig.layout.shapes} == {300, 900}
    dashes = {tr.name: tr.line.dash for tr in fig.data}
    assert dashes[f"#3 {by[3].layout} (stopped)"] == "dot" and dashes[f"#1 {by[1].layout}"] == "solid"
    assert max(tr.line.width for tr in fig.data) == fig.data[1].line.width  # the front is drawn thick
    with pytest.raises(ValueError, match="allowed: recall, recall_auc"):
        curves_info(study_data(study), "val_loss")


def test_build_figures_always_returns_every_id_even_for_an_empty_study():
    empty = optuna.create_study(directions=["maximize", "minimize"])
    figs = build_figures(study_data(empty))
    assert tuple(figs) == FIGURE_IDS
    assert all(f.layout.annotations for f in figs.values())  # each says why it is empty
    figs = build_figures(study_data(make_study()))
    assert tuple(figs) == FIGURE_IDS and not figs["hlnas_recall_vs_kv"].layout.annotations


def test_attach_figures_replaces_by_stable_id(tmp_path):
    from optuna_dashboard._custom_plot_data import get_plotly_graph_objects

    url = f"sqlite:///{tmp_path}/s.db"
    study = make_study(url, "g")
    storage = optuna.storages.RDBStorage(url)

    def saved() -> dict[str, dict]:
        attrs = storage.get_study_system_attrs(storage.get_study_id_from_name("g"))
        return {k: json.loads(v) for k, v in get_plotly_graph_objects(attrs).items()}

    assert attach_figures(study) == list(FIGURE_IDS)
    first = saved()
    assert set(first) == set(FIGURE_IDS)
    new_layout = str(build_layout("gated_deltanet", "6:1"))
    assert new_layout not in json.dumps(first["hlnas_recall_vs_kv"]["data"])
    add_trial(study, trial_attrs("gated_deltanet", "6:1"))
    attach_figures(study)  # the same ids: overwritten, not added
    second = saved()
    assert set(second) == set(FIGURE_IDS)
    assert new_layout in json.dumps(second["hlnas_recall_vs_kv"]["data"])
    assert len(second["hlnas_hypervolume"]["data"][0]["x"]) == len(first["hlnas_hypervolume"]["data"][0]["x"]) + 1


# -- error messages ------------------------------------------------------------------------


def test_errors_name_the_bad_input_and_the_fix(tmp_path):
    url = f"sqlite:///{tmp_path}/s.db"
    make_study(url, "paper-grid")
    with pytest.raises(UnknownStudyError, match=r"no study named 'paper-grd'.*Did you mean: paper-grid\? Available: paper-grid"):
        load_study(url, "paper-grd")
    with pytest.raises(UnknownStudyError, match="Available: paper-grid"):
        start_server(url, port=0, study_name="nope")
    with pytest.raises(StorageError, match=r"scheme 'redis' is not allowed; allowed schemes: sqlite, postgresql, mysql"):
        open_storage("redis://localhost/0")
    with pytest.raises(StorageError, match=r"'results/study.db' is not a URL; allowed schemes: sqlite"):
        open_storage("results/study.db")
    with pytest.raises(StorageError, match=r"no such SQLite file '.*missing.db'"):
        open_storage(f"sqlite:///{tmp_path}/missing.db")
    assert not (tmp_path / "missing.db").exists()  # optuna would have created it
    with pytest.raises(StorageError, match=r"no such journal file '.*study.log'"):
        open_storage(f"journal:///{tmp_path}/study.log")
    with pytest.raises(HlnasError, match="refresh_s must be > 0 seconds, got 0"):
        start_server(url, port=0, refresh_s=0)
    (tmp_path / "junk.db").write_text("not a database")
    with pytest.raises(StorageError, match=r"storage 'sqlite:///.*junk.db': the file is damaged"):
        open_storage(f"sqlite:///{tmp_path}/junk.db")
    with pytest.raises(StorageError, match="cannot open storage 'postgresql://nobody@127.0.0.1:9/none'"):
        open_storage("postgresql://nobody@127.0.0.1:9/none")  # no driver or nothing listening: named either way
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(PortInUseError, match=rf"port {port} on 127.0.0.1 is already in use.*--port {port + 1}"):
            start_server(url, port=port)


def test_study_detail_waits_while_figures_are_written(tmp_path):
    url = f"sqlite:///{tmp_path}/s.db"
    make_study(url, "g")
    server = start_server(url, port=0, refresh_s=60)
    try:
        got: list = []
        with server.refresher.lock:  # as during a re-attach
            reader = threading.Thread(target=lambda: got.append(_api(server, "studies/1")))
            reader.start()
            reader.join(0.5)
            assert not got  # the figures route waits
            assert _api(server, "studies")["study_summaries"]  # other routes do not
        reader.join(10)
        assert {g["id"] for g in got[0]["plotly_graph_objects"]} == set(FIGURE_IDS)
    finally:
        server.stop()


# -- the served dashboard in a real browser -------------------------------------------------

_FIGURES_JS = """JSON.stringify([...document.querySelectorAll('[id^="user-defined-plot:"]')].map(e => [
  e.id.slice('user-defined-plot:'.length),
  e.querySelectorAll('.scatterlayer .point, .barlayer .point, .heatmaplayer image, .hm image, .table .cell-rect').length,
  [...e.querySelectorAll('.textpoint text')].map(t => t.textContent)]))"""


async def _browse(url: str, chromium: str, shot: Path, new_layout: str, add_new_trial) -> dict:
    """Load the study page, wait for every hlnas figure to draw points, screenshot, add a trial, reload."""
    import choreographer

    problems: list[str] = []
    out: dict = {}
    async with choreographer.Browser(path=chromium, headless=True) as browser:
        tab = await browser.create_tab("")

        async def on_console(m):
            if m["params"]["type"] in ("error", "assert"):
                problems.append("console." + m["params"]["type"] + ": " + json.dumps(m["params"]["args"])[:300])

        async def on_exception(m):
            problems.append("exception: " + json.dumps(m["params"]["exceptionDetails"])[:300])

        async def on_log(m):
            if m["params"]["entry"]["level"] == "error":
                problems.append(f"log: {m['params']['entry'].get('text')} {m['params']['entry'].get('url', '')}")

        tab.subscribe("Runtime.consoleAPICalled", on_console)
        tab.subscribe("Runtime.exceptionThrown", on_exception)
        tab.subscribe("Log.entryAdded", on_log)
        for cmd in ("Runtime.enable", "Log.enable", "Page.enable"):
            await tab.send_command(cmd)
        await tab.send_command("Emulation.setDeviceMetricsOverride",
                               params={"width": 1600, "height": 2400, "deviceScaleFactor": 1, "mobile": False})  # fmt: skip

        async def evaluate(js):
            r = await tab.send_command("Runtime.evaluate", params={"expression": js, "returnByValue": True})
            return r["result"]["result"].get("value")

        async def wait_for_figures(must_contain=None):
            figs = {}
            for _ in range(80):
                figs = {fid: (n, labels) for fid, n, labels in json.loads(await evaluate(_FIGURES_JS) or "[]")}
                drawn = set(FIGURE_IDS) <= set(figs) and all(figs[f][0] > 0 for f in FIGURE_IDS if f not in EMPTY_IN_PAPER_GRID)
                if drawn and (must_contain is None or must_contain in figs["hlnas_recall_vs_kv"][1]):
                    return figs
                await asyncio.sleep(0.25)
            return figs

        # the capture works: a probe error is seen (and then discounted)
        await evaluate("console.error('hlnas-probe')")
        await asyncio.sleep(0.2)
        out["probe_seen"] = any("hlnas-probe" in p for p in problems)
        problems.clear()

        await tab.send_command("Page.navigate", params={"url": url})
        out["before"] = await wait_for_figures()
        shot_data = await tab.send_command("Page.captureScreenshot", params={"format": "png", "captureBeyondViewport": True})
        shot.write_bytes(base64.b64decode(shot_data["result"]["data"]))
        out["title"] = await evaluate("document.title")

        out["refreshed_by"] = add_new_trial()  # the server keeps running; the refresher re-attaches the figures
        await tab.send_command("Page.reload")
        out["after"] = await wait_for_figures(must_contain=new_layout)
        out["problems"] = list(problems)
    return out


@pytest.mark.timeout(120)
def test_served_dashboard_renders_hlnas_figures_and_follows_the_study(tmp_path):
    chromium = find_chromium()
    if chromium is None:
        pytest.skip("no Chromium: apt-get install -y chromium")
    url = f"sqlite:///{tmp_path}/study.db"
    make_study(url, "paper-grid")
    server = start_server(url, host="127.0.0.1", port=0, refresh_s=0.3)
    try:
        # the study API lists every hlnas figure
        study_id = next(s["study_id"] for s in _api(server, "studies")["study_summaries"] if s["study_name"] == "paper-grid")
        detail = _api(server, f"studies/{study_id}")
        assert {g["id"] for g in detail["plotly_graph_objects"]} == set(FIGURE_IDS)

        new_attrs = trial_attrs("gated_deltanet", "6:1", recall=0.99)  # a new layout, on the front
        new_layout = new_attrs["layout"]

        def add_new_trial():
            study = optuna.load_study(study_name="paper-grid", storage=url)
            add_trial(study, new_attrs)
            deadline = time.time() + 15
            while time.time() < deadline:  # the API shows the refreshed figure without a restart
                objs = {g["id"]: g["graph_object"] for g in _api(server, f"studies/{study_id}")["plotly_graph_objects"]}
                if new_layout in objs["hlnas_recall_vs_kv"] and server.refresher.seen["paper-grid"] == len(study.trials):
                    return time.time() - (deadline - 15)
                time.sleep(0.2)
            return None

        shot = tmp_path / "dashboard_screenshot.png"
        result = asyncio.run(_browse(server.study_url("paper-grid"), chromium, shot, new_layout, add_new_trial))
    finally:
        server.stop()

    assert result["probe_seen"], "console errors are not being captured"
    assert result["title"]  # the page loaded
    before, after = result["before"], result["after"]
    assert set(FIGURE_IDS) <= set(before), f"figures on the page: {sorted(before)}"
    assert all(before[f][0] > 0 for f in FIGURE_IDS if f not in EMPTY_IN_PAPER_GRID), {f: before[f][0] for f in FIGURE_IDS}
    front_labels = before["hlnas_recall_vs_kv"][1]
    assert str(build_layout("deltanet", "3:1")) in front_labels and new_layout not in front_labels
    assert result["refreshed_by"] is not None, "the figure was not refreshed after a trial was added"
    assert new_layout in after["hlnas_recall_vs_kv"][1]
    assert after["hlnas_recall_vs_kv"][0] > before["hlnas_recall_vs_kv"][0]
    assert result["problems"] == [], result["problems"]
    assert shot.stat().st_size > 50_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # every run keeps its screenshot as an artifact (git-ignored)
    artifacts = REPO / "tests" / "artifacts"
    artifacts.mkdir(exist_ok=True)
    shutil.copyfile(shot, artifacts / "dashboard_screenshot.png")


def test_the_papers_recall_has_its_own_axis_beside_a_graded_recall_objective():
    """Table 7's RULER averages beside recall_auc (the area under a learning curve, another measure) sit on their own
    y axis, named "ranks only", in both figures; beside the final recall both are accuracies and share one axis."""
    study = make_study()
    study.set_user_attr("hlnas_objectives", [{**o, "metric": "recall_auc"} if o["name"] == "recall" else o
                                             for o in study.user_attrs["hlnas_objectives"]])
    graded = study_data(study)
    info = ratio_info(graded, "recall")
    assert info.paper_secondary and "ranks only" in info.paper_axis
    fig = plot_ratio(info)
    assert [tr.yaxis for tr in fig.data if "paper" in tr.name] == ["y2"] * 3 and "ranks only" in fig.layout.yaxis2.title.text
    assert [s.yref for s in fig.layout.shapes if s.line.dash == "dot"] == ["y2"]  # the paper's Transformer too
    trade = tradeoff_info(graded, "recall")
    assert trade.paper_secondary and trade.paper_points
    tfig = plot_tradeoff(trade)
    assert {tr.yaxis for tr in tfig.data if "paper" in tr.name} == {"y2"} and "ranks only" in tfig.layout.yaxis2.title.text
    final = study_data(make_study())
    assert not ratio_info(final, "recall").paper_secondary and not tradeoff_info(final, "recall").paper_secondary
    assert {tr.yaxis for tr in plot_tradeoff(tradeoff_info(final, "recall")).data if "paper" in tr.name} == {"y"}
