"""experiments/recall_sweep.py, the protocol sweep the H200 sessions run: a tiny sweep on CPU end to end (a
duplicated option once broke it before any case ran, and nothing noticed until a GPU session needed it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_tiny_sweep_reports_every_case_beside_its_no_recall_baseline(tmp_path):
    cmd = [sys.executable, str(ROOT / "experiments" / "recall_sweep.py"), "--layouts", "AAAA,GGAG", "--layers", "4",
           "--d-model", "16", "--kv-pairs", "2", "--seq-len", "16", "--vocab", "16", "--steps", "20", "--eval-every",
           "10", "--test", "16", "--val", "16", "--jobs", "1", "--no-graph", "--out", str(tmp_path)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "recall_sweep.jsonl").read_text().splitlines()]
    assert sorted(row["layout"] for row in rows) == ["AAAA", "GGAG"]
    for row in rows:
        assert row["status"] == "ok" and row["steps"] == 20 and [c[0] for c in row["curve"]] == [10, 20]
        assert row["baseline"] == 0.5  # copy-any at K=2
    table = (tmp_path / "recall_sweep.md").read_text()
    assert "no-recall" in table and "| AAAA |" in table and "| GGAG |" in table
