"""The study report: self-contained HTML (plotly.js inlined, front table, all figures) and PNGs via kaleido."""

from __future__ import annotations

import asyncio
import json
import re
import struct

import pytest

from hlnas.analysis.figures import FIGURE_IDS
from hlnas.model.layout import build_layout
from hlnas.analysis.pareto import front, study_data
from hlnas.analysis.report import ReportError, find_chromium, write_report
from hlnas.analysis.pareto import StorageError, UnknownStudyError
from tests.studies import EMPTY_IN_PAPER_GRID, make_study


@pytest.fixture
def study_url(tmp_path):
    url = f"sqlite:///{tmp_path}/study.db"
    make_study(url, "paper-grid")
    return url


def test_html_report_is_self_contained_with_front_table_and_figures(study_url, tmp_path):
    paths = write_report(study_url, "paper-grid", tmp_path / "out", png=False)
    assert paths == [tmp_path / "out" / "report.html"]
    page = paths[0].read_text()
    # plotly.js is inlined, nothing is fetched from a CDN
    assert "plotly.js v" in page and len(page) > 3_000_000
    assert not re.search(r"<script[^>]+src=", page) and not re.search(r"<link[^>]+href=", page)
    for fid in FIGURE_IDS:
        assert f'id="{fid}"' in page
    assert "paper (arXiv 2507.06457, Table 7)" in page and "Table 6" in page
    # the front table: every front layout once, with its recall and KV bytes
    import optuna

    data = study_data(optuna.load_study(study_name="paper-grid", storage=study_url))
    table = page[page.index("<h2>Pareto front</h2>"): page.index("<h2>Failed trials</h2>")]
    fr = front(data.records, data.directions, data.objective_names).front
    assert table.count("<tr><td>#") == len({r.layout for r in fr})
    for r in fr:
        assert f"<code>{r.layout}</code>" in table and f"{r.metric('recall'):.4g}" in table
    assert "0 B" in table and "MiB" in table and "<th>val_loss</th>" in table
    # the failed trial with its error; the infeasible one is counted
    failed = page[page.index("<h2>Failed trials</h2>"): page.index("<h2>Figures</h2>")]
    assert str(build_layout("retnet", "6:1")) in failed and "CUDA out of memory" in failed
    assert "1 failed, 1 infeasible" in page


def test_report_errors_name_the_study_storage_and_browser(study_url, tmp_path, monkeypatch):
    with pytest.raises(UnknownStudyError, match="Available: paper-grid"):
        write_report(study_url, "nope", tmp_path / "x")
    with pytest.raises(StorageError, match="no such SQLite file"):
        write_report(f"sqlite:///{tmp_path}/none.db", "paper-grid", tmp_path / "x")
    monkeypatch.setattr("hlnas.analysis.report.find_chromium", lambda: None)
    with pytest.raises(ReportError, match=r"apt-get install -y chromium.*png=False"):
        write_report(study_url, "paper-grid", tmp_path / "y")
    assert not (tmp_path / "y" / "report.html").exists()  # nothing half-written


def _png_size(path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


async def _count_drawn(page_url: str, chromium: str) -> dict:
    import choreographer

    async with choreographer.Browser(path=chromium, headless=True) as browser:
        tab = await browser.create_tab("")
        await tab.send_command("Page.navigate", params={"url": page_url})
        js = ("JSON.stringify(Object.fromEntries([...document.querySelectorAll('.js-plotly-plot')].map(e => [e.id, "
              "e.querySelectorAll('.scatterlayer .point, .barlayer .point, .heatmaplayer image, .hm image, .table .cell-rect').length])))")
        drawn = {}
        for _ in range(60):
            r = await tab.send_command("Runtime.evaluate", params={"expression": js, "returnByValue": True})
            drawn = json.loads(r["result"]["result"].get("value") or "{}")
            if len(drawn) == len(FIGURE_IDS):
                break
            await asyncio.sleep(0.25)
        return drawn


@pytest.mark.timeout(120)
def test_png_per_figure_and_html_draws_offline(study_url, tmp_path):
    chromium = find_chromium()
    if chromium is None:
        pytest.skip("no Chromium for kaleido: apt-get install -y chromium")
    paths = write_report(study_url, "paper-grid", tmp_path / "out", width=800, height=500)
    pngs = paths[1:]
    assert [p.name for p in pngs] == [f"{fid}.png" for fid in FIGURE_IDS]
    for p in pngs:
        assert _png_size(p) == (800, 500) and p.stat().st_size > 10_000
    # opened from disk (no server, no network), every figure draws its marks
    drawn = asyncio.run(_count_drawn(paths[0].as_uri(), chromium))
    assert set(drawn) == set(FIGURE_IDS), drawn
    assert all(n > 0 for f, n in drawn.items() if f not in EMPTY_IN_PAPER_GRID), drawn
    assert all(drawn[f] == 0 for f in EMPTY_IN_PAPER_GRID), drawn  # empty for the reason given, not by accident
