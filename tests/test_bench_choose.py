"""experiments/bench/choose.py: the one rule h200.sh's mps:auto, RUNS_PER_WORKER=auto and CAL_REPLICAS=auto decide by,
on bench tables written here (the columns proxy_throughput.py writes)."""

from __future__ import annotations

import csv

import pytest

from experiments.bench import choose

COLUMNS = ["layout", "n_runs", "mode", "steps_per_s", "tokens_per_s", "mfu", "ratio", "steady_steps_per_s",
           "steady_ratio", "overlap", "wall_s"]


def _table(tmp_path, rows, name="proxy_throughput_h200_2026-12-04.csv"):
    """rows: (layout, n, mode, whole-round steps/s, steady steps/s or '')."""
    with open(tmp_path / name, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for layout, n, mode, sps, steady in rows:
            w.writerow([layout, n, mode, sps, 0, 0, "", steady, "", "", 1])
    return choose.read_rows(str(tmp_path))


def test_the_steady_rate_decides_where_the_table_has_it(tmp_path):
    """Builds and captures dilute the whole round: 28 -> 33 steps/s is 1.18x, but while every run trained MPS did 2x."""
    rows = _table(tmp_path, [("GGA", 8, "processes", 28, 42), ("GGA", 8, "mps", 33, 84)])
    assert choose.gains(rows, "mps", 8) == {"GGA": pytest.approx(2.0)} and choose.mps_wins(rows)
    old = _table(tmp_path, [("GGA", 8, "processes", 28, ""), ("GGA", 8, "mps", 33, "")])  # a table from before
    assert choose.gains(old, "mps", 8) == {"GGA": pytest.approx(33 / 28)} and not choose.mps_wins(old)


def test_every_layout_must_gain_and_only_the_largest_n_decides(tmp_path):
    rows = _table(tmp_path, [("AAA", 8, "processes", 0, 40), ("AAA", 8, "mps", 0, 60),
                             ("GGA", 8, "processes", 0, 40), ("GGA", 8, "mps", 0, 48),   # 1.2x: not enough
                             ("GGA", 1, "processes", 0, 30), ("GGA", 1, "mps", 0, 90)])  # N=1 does not decide
    assert choose.largest_n(rows) == 8 and not choose.mps_wins(rows)
    assert choose.mps_wins(rows, threshold=1.2)


def test_compiled_mps_is_judged_against_compiled_workers(tmp_path):
    """compile's own gain is not MPS's: mps_compiled over compiled, not over plain processes."""
    rows = _table(tmp_path, [("GGA", 8, "processes", 0, 40), ("GGA", 8, "compiled", 0, 58),
                             ("GGA", 8, "mps_compiled", 0, 64)])
    assert choose.gains(rows, "mps_compiled", 8) == {"GGA": pytest.approx(64 / 58)} and not choose.mps_wins(rows)


def test_workers_picks_streams_or_mps_by_their_worst_layout_else_time_slices(tmp_path):
    both = [("GGA", 12, "processes", 0, 40), ("GGA", 12, "streams", 0, 60), ("GGA", 12, "mps", 0, 80)]
    assert choose.workers(_table(tmp_path, both)) == (12, 1, 1)  # MPS: 12 workers of one run each
    streams = [("GGA", 12, "processes", 0, 40), ("GGA", 12, "streams", 0, 60), ("GGA", 12, "mps", 0, 44)]
    assert choose.workers(_table(tmp_path, streams)) == (1, 12, 0)  # 12 streams of one worker
    assert choose.workers(_table(tmp_path, [("GGA", 12, "processes", 0, 40), ("GGA", 12, "mps", 0, 48)])) == (3, 1, 0)
    assert choose.workers([]) == (3, 1, 0)


def test_replicas_are_judged_at_two_runs(tmp_path):
    rows = _table(tmp_path, [("GGA", 2, "processes", 0, 40), ("GGA", 2, "replicas", 0, 50),
                             ("GGA", 12, "processes", 0, 40), ("GGA", 12, "replicas", 0, 30)])
    assert choose.replicas_win(rows) and not choose.replicas_win(rows, threshold=1.3)


def test_the_command_line_answers_as_h200_sh_reads_it(tmp_path, capsys):
    _table(tmp_path, [("GGA", 8, "processes", 0, 40), ("GGA", 8, "mps", 0, 80)])
    assert choose.main(["mps", str(tmp_path)]) == 0
    assert choose.main(["workers", str(tmp_path)]) == 0 and capsys.readouterr().out.split() == ["8", "1", "1"]
    assert choose.main(["replicas", str(tmp_path)]) == 0 and capsys.readouterr().out.strip() == "0"
    assert choose.main(["mps", str(tmp_path / "nothing")]) == 1  # no table: MPS stays off


def test_a_gain_of_a_mode_without_a_baseline_names_the_modes_that_have_one():
    with pytest.raises(ValueError, match=r"mode 'processes' has no baseline to gain over; modes: mps, streams"):
        choose.gains([], "processes", 8)
