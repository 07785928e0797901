"""experiments/bench/compile_regions.py end to end on the CPU, on the aot_eager backend (inductor's cold compile
takes a minute even at 2 layers): each mode in its own process, the rows written after each one, ratios against
``whole`` from the same run, and a failing mode a row of its own instead of the end of the run."""

from __future__ import annotations

import csv

import pytest

from experiments.bench import compile_regions

pytestmark = pytest.mark.usefixtures("one_thread")


def rows_of(folder) -> list[dict]:
    (path,) = folder.glob("compile_regions_cpu_*.csv")
    return list(csv.DictReader(open(path)))


def test_the_compile_bench_times_every_mode_against_whole_in_one_run(tmp_path):
    args = ["--layouts", "transformer,bogus", "--layers", "2", "--steps", "2", "--backend", "aot_eager",
            "--modes", "whole,regional,eager", "--device-name", "cpu", "--out", str(tmp_path)]
    assert compile_regions.main(args) == 0
    rows = rows_of(tmp_path)
    ok = [r for r in rows if r["layout"] == "AA"]
    assert [r["mode"] for r in ok] == ["whole", "regional", "eager"]
    assert all(float(r["setup_s"]) > 0 and float(r["steps_per_s"]) > 0 and r["step_mode"] == "eager" for r in ok)
    assert ok[0]["setup_vs_whole"] == "1.0" and ok[0]["speed_vs_whole"] == "1.0"
    assert float(ok[1]["setup_vs_whole"]) == pytest.approx(float(ok[1]["setup_s"]) / float(ok[0]["setup_s"]), rel=1e-2)
    # the same model and batch in every mode: the first loss is the same whether compiled or not
    assert float(ok[1]["first_loss"]) == pytest.approx(float(ok[0]["first_loss"]), rel=1e-4)
    assert float(ok[2]["first_loss"]) == pytest.approx(float(ok[0]["first_loss"]), rel=1e-4)
    bad = [r for r in rows if r["layout"] == "bogus"]
    assert len(bad) == 3 and all("bogus" in r["error"] and r["setup_vs_whole"] == "" for r in bad)
    md = next(tmp_path.glob("compile_regions_cpu_*.md")).read_text()
    assert "--backend aot_eager" in md and "| AA | regional |" in md


def test_a_bad_space_is_named_before_any_mode_runs(tmp_path):
    with pytest.raises(Exception, match="nowhere.yaml"):
        compile_regions.main(["--space", str(tmp_path / "nowhere.yaml"), "--out", str(tmp_path)])
    assert not list(tmp_path.glob("compile_regions_*"))
