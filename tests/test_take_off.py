"""experiments/paper_grid/take_off.py: when each boundary run of the grid left the no-recall plateau, per seed, from
the trials' stored checks."""

from __future__ import annotations

import optuna

from hlnas.analysis.pareto import StudyData, TrialRecord
from tests.helpers import paper_grid_script

take_off = paper_grid_script("take_off")


def _trial(n, layout, mixer, ratio, curve, state="complete", status="ok"):
    checks = [{"step": 100 * (i + 1), "recall": v} for i, v in enumerate(curve)]
    attrs = {"layout": layout, "mixers": [("attention" if c == "A" else mixer) for c in layout], "ratio": ratio,
             "linear_mixers": [mixer], "status": status, "hlnas_checks": checks, "recall": curve[-1]}
    return TrialRecord(number=n, state=state, values=(curve[-1], 1.0) if state == "complete" else None, attrs=attrs,
                       objective_names=("recall", "kv_cache"))


def _study(name, *trials):
    return StudyData(name, ("maximize", "minimize"), ("recall", "kv_cache"), tuple(trials), {"hlnas_version": "x"})


def test_take_off_is_the_first_check_above_the_level_and_none_if_never():
    assert take_off.take_off_step((100, 200, 300, 400), (0.0, 0.1, 0.4, 0.9)) == 300  # strictly above 0.1
    assert take_off.take_off_step((100, 200), (0.02, 0.05)) is None
    assert take_off.take_off_step((100, 200), (0.02, 0.05), level=0.03) == 200


def test_a_split_cell_shows_one_seed_taking_off_and_the_other_never():
    seed0 = _study("g", _trial(0, "GGGGGA", "gla", "6:1", [0.0, 0.0, 0.0]),  # a later step never took off
                   _trial(1, "GGAGGA", "gla", "3:1", [0.5, 0.99]),          # a ratio not asked for
                   _trial(2, "GGGGGA", "gla", "6:1", [0.0], state="fail", status="failed"))
    seed1 = _study("g_s1", _trial(0, "GGGGGA", "gla", "6:1", [0.0, 0.02, 0.6, 0.99]))
    curves = take_off.cell_curves({0: seed0, 1: seed1}, ("6:1",))
    assert list(curves) == [("gla", "6:1")]
    assert curves[("gla", "6:1")][0] == ((100, 200, 300), (0.0, 0.0, 0.0))  # the failed trial is not a seed-0 run
    rows = {ln.split(" | ")[2]: ln for ln in take_off.table(curves).splitlines()[2:]}
    assert "| never |" in rows["0"] and "| 0.000 | 300 |" in rows["0"]
    assert "| 300 |" in rows["1"] and "0.990 (400)" in rows["1"]
    fig = take_off.figure(curves)
    assert [t.name for t in fig.data] == ["6:1, seed 0", "6:1, seed 1"]
    assert fig.layout.xaxis.range == (0, 400)


def test_by_placement_gives_each_placement_of_a_cell_its_row_and_colour():
    """A placement study: HGRN-2 6:1 with attention last in each block (paper), first (front) and last (back)."""
    seed0 = _study("p", _trial(0, "NNNNNANNNNNA", "hgrn2", "6:1", [0.0, 0.5, 0.99]),
                   _trial(1, "AANNNNNNNNNN", "hgrn2", "6:1", [0.6, 0.99]),
                   _trial(2, "NNNNNNNNNNAA", "hgrn2", "6:1", [0.0, 0.0, 0.0, 0.0]))
    curves = take_off.cell_curves({0: seed0}, ("6:1",), by_placement=True)
    assert list(curves) == [("hgrn2 6:1", "paper"), ("hgrn2 6:1", "front"), ("hgrn2 6:1", "back")]
    text = take_off.table(curves, ("mixer, ratio", "placement"))
    assert text.startswith("| mixer, ratio | placement | seed |")
    assert "| hgrn2 6:1 | front | 0 | 100 |" in text and "| hgrn2 6:1 | back | 0 | never |" in text
    fig = take_off.figure(curves)
    assert len({t.line.color for t in fig.data}) == 3 and [t.name for t in fig.data][1] == "front, seed 0"
    assert list(take_off.cell_curves({0: seed0}, ("6:1",))) == [("hgrn2", "6:1")]  # without it: one cell, as before


def test_main_reads_both_seeds_studies_and_says_in_one_line_what_is_missing(tmp_path, capsys):
    storage = f"sqlite:///{tmp_path / 's.db'}"
    for name, curve in (("g", [0.0, 0.01]), ("g_s1", [0.2, 0.99])):
        st = optuna.create_study(study_name=name, storage=storage, directions=["maximize", "minimize"])
        rec = _trial(0, "HHHHHHHHHHHA", "hgrn", "12:1", curve)
        st.add_trial(optuna.trial.create_trial(values=list(rec.values), user_attrs=dict(rec.attrs)))
    out = tmp_path / "out"
    args = ["--storage", storage, "--study", "g", "--seed-study", "g_s1", "--out", str(out), "--format", "html"]
    assert take_off.main(args) == 0
    md = (out / "take_off.md").read_text()
    assert "| hgrn | 12:1 | 0 | never |" in md and "| hgrn | 12:1 | 1 | 100 |" in md
    assert (out / "take_off.html").stat().st_size > 0
    assert take_off.main([*args[:4], "--seed-study", "nope", "--out", str(out)]) == 2
    assert "no study named 'nope' in sqlite:///" in capsys.readouterr().err
    assert take_off.main([*args[:6], "--ratios", "3:1", "--out", str(out)]) == 2
    assert "no complete trial at ratios 3:1" in capsys.readouterr().err
