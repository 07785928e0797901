"""experiments/paper_grid/analyse.sh: the grid's CPU analysis in one command. Run with a fake python that records each
step's arguments, so what is tested is the wiring: every step runs on a copy of the database, the utilisation files
reach collect.py, and a failing step neither stops the others nor hides its exit status."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "paper_grid" / "analyse.sh"


def _run(tmp_path: Path, *args: str, fail: str = "", **env_add: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    calls = tmp_path / "calls"
    fake = tmp_path / "python"
    fake.write_text(f'#!/bin/sh\necho "$*" >>{calls}\ncase "$*" in *{fail or "@never@"}*) exit 3;; esac\nexit 0\n')
    fake.chmod(0o755)
    env = {**os.environ, "PYTHON": str(fake), **env_add}
    r = subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60)
    return r, (calls.read_text().splitlines() if calls.exists() else [])


def test_every_step_runs_on_a_copy_of_the_database_with_the_utilisation_files(tmp_path):
    db = tmp_path / "h.db"
    db.write_text("a database")
    out = tmp_path / "out"
    r, calls = _run(tmp_path, str(db), str(out), "u1.csv", "u2.csv")
    assert r.returncode == 0, r.stdout + r.stderr
    tools = [c.split()[1] if c.startswith("-m") else c.split()[0] for c in calls]
    assert tools == ["experiments.paper_grid.collect", "experiments/paper_grid/compare.py",
                     "experiments.paper_grid.grid_figure", "experiments.paper_grid.take_off",
                     "experiments.paper_grid.budget_whatif", "hlnas", "experiments/paper_grid/tabular_bench.py",
                     "experiments/paper_grid/tabular_bench.py", "hlnas"]
    assert "--util u1.csv u2.csv --out" in calls[0] and f"--out {out}/grid.csv" in calls[0]
    storages = {c.split("--storage ")[1].split()[0] for c in calls if "--storage" in c}
    assert len(storages) == 1 and str(db) not in storages.pop()  # a copy, never the database itself
    assert "--seed 0" in calls[6] and "--seed 1" in calls[7]
    assert db.read_text() == "a database"


def test_a_failing_step_does_not_stop_the_rest_and_its_status_is_the_scripts(tmp_path):
    db = tmp_path / "h.db"
    db.write_text("x")
    r, calls = _run(tmp_path, str(db), str(tmp_path / "out"), fail="compare.py")
    assert r.returncode == 3
    assert "== compare rc=3" in r.stdout and len(calls) == 9


def test_a_missing_database_or_argument_is_one_line(tmp_path):
    r, calls = _run(tmp_path, str(tmp_path / "none.db"), str(tmp_path / "out"))
    assert r.returncode == 2 and "no study database at" in r.stderr and not calls
    r, _ = _run(tmp_path, "only-one")
    assert r.returncode == 2 and r.stderr.startswith("usage:")


def test_place_analyses_a_placement_study_and_its_seed_1_twin_instead(tmp_path):
    db = tmp_path / "h.db"
    db.write_text("x")
    out = tmp_path / "out"
    r, calls = _run(tmp_path, str(db), str(out), "u.csv", PLACE="placement_x", PSP="p.yaml", SEEDS="3")
    assert r.returncode == 0, r.stdout + r.stderr
    tools = [c.split()[1] if c.startswith("-m") else c.split()[0] for c in calls]
    assert tools == ["experiments.paper_grid.collect", "experiments.paper_grid.placement", "experiments.paper_grid.take_off",
                     "experiments/paper_grid/tabular_bench.py", "experiments/paper_grid/tabular_bench.py", "hlnas"]
    assert "--study placement_x --seed-study placement_x_s1" in calls[0] and "--util u.csv" in calls[0]
    assert f"--out {out}/placement.csv" in calls[0] and f"--table {out}/placement.csv" in calls[1]
    assert "--study placement_x --seed-study placement_x_s1" in calls[2] and "--by-placement" in calls[2]
    assert all("--space p.yaml" in c and "--seeds 3" in c for c in calls[3:5])
    assert "--seed 0" in calls[3] and "--seed 1" in calls[4] and "--study placement_x" in calls[5]
    assert not any("paper_grid_h200_lr" in c for c in calls)  # nothing of the grid's own analysis

