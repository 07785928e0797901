"""hlnas search --results-from: layouts another study measured the same way are adopted (told its result, result_from
STUDY#N, nothing trained, counted as this study's); a study that measures differently is refused before anything is
written; the sources are stored, so a resume adopts too."""

from __future__ import annotations

import re

import optuna
import pytest

from hlnas.errors import HlnasError
from hlnas.search.adopt import RESULTS_FROM_ATTR, result_differences
from hlnas.search.executors import InlineExecutor
from hlnas.search.study import run_search
from hlnas.search.options import SearchOptions
from hlnas.search.trial import TrialResult
from hlnas.space import load_space
from tests.helpers import paper_grid_script


def _space(placements, ratios=("6:1", "3:1"), name="s"):
    base = load_space("tiny")
    return base.with_overrides(name=name, mixers=["hgrn"], ratios=list(ratios), placements=list(placements),
                               include_transformer=False, sampler="grid")


class FakeTraining:
    """Stands in for training: a layout's metrics follow from its string; it records what it trained."""

    def __init__(self):
        self.trained = []

    def __call__(self, spec) -> TrialResult:
        self.trained.append(spec.layout)
        share = spec.layout.count("A") / len(spec.layout)
        return TrialResult(spec.number, "ok", {"status": "ok", "recall": 0.5 + share, "val_loss": 2.0 + share,
                                               "kv_cache_bytes": float(spec.layout.count("A") * 1000),
                                               "started_at": 100.0, "finished_at": 101.0}, wall_s=1.0)


def _search(space, url, name, fake, **kw):
    return run_search(space, SearchOptions(
        storage=url, study_name=name, n_trials=kw.pop("n_trials", 10), executor=InlineExecutor(run=fake),
        skip_calibration=kw.pop("skip_calibration", True), **kw))


def test_a_placement_extension_adopts_the_grids_paper_cells_and_trains_only_the_new_placements(tmp_path):
    url = f"sqlite:///{tmp_path}/s.db"
    grid_fake, place_fake = FakeTraining(), FakeTraining()
    grid = _search(_space(["paper"], name="grid"), url, "grid", grid_fake)
    assert sorted(grid_fake.trained) == ["HHAHHA", "HHHHHA"]
    events = []
    place = _search(_space(["paper", "front"], name="place"), url, "place", place_fake, results_from=["grid"],
                    on_event=lambda kind, data: events.append((kind, data)))
    assert sorted(d["layout"] for k, d in events if k == "adopted") == ["HHAHHA", "HHHHHA"]
    assert sorted(place_fake.trained) == ["AAHHHH", "AHHHHH"]  # the front cells only
    done = {t.user_attrs["layout"]: t for t in place.get_trials(states=(optuna.trial.TrialState.COMPLETE,))}
    assert set(done) == {"HHAHHA", "HHHHHA", "AAHHHH", "AHHHHH"}  # the adopted ones count as this study's
    by_layout = {t.user_attrs["layout"]: t for t in grid.trials}
    for layout in ("HHAHHA", "HHHHHA"):
        t = done[layout]
        assert t.user_attrs["result_from"] == f"grid#{by_layout[layout].number}" and "reused_from" not in t.user_attrs
        assert t.values == by_layout[layout].values and t.user_attrs["wall_s"] == 0.0
        assert "started_at" not in t.user_attrs  # the source run's clock is its own: not this trial's GPU time
    assert "result_from" not in done["AHHHHH"].user_attrs
    collect = paper_grid_script("collect")  # the analysis names where an adopted row was measured
    row = collect._trial_row("place", done["HHHHHA"], None, None)
    assert row["source"] == f"place#{done['HHHHHA'].number} (result of grid#{by_layout['HHHHHA'].number})"
    assert place.user_attrs[RESULTS_FROM_ATTR] == ["grid"]
    assert {t.number for t in place.best_trials} >= {done["HHHHHA"].number}  # an adopted result is on the front
    from hlnas.cli.console import SearchProgress

    ui, lines = SearchProgress(4, progress=False), []
    ui.write = lines.append
    ui.event("adopted", next(d for k, d in events if k == "adopted"))
    assert lines[0].split()[2] == "adopted" and "nothing trained" in lines[0] and "grid#" in lines[0]


def test_a_source_that_measures_differently_is_refused_before_a_study_is_made(tmp_path):
    url = f"sqlite:///{tmp_path}/s.db"
    _search(_space(["paper"], name="grid"), url, "grid", FakeTraining())
    other_seed = _space(["paper", "front"], name="place").with_sets(["train.seed=1"])
    assert [d.split(":")[0] for d in result_differences(_space(["paper"]), other_seed)] == ["scale.train.seed"]
    with pytest.raises(HlnasError, match=r"--results-from grid: it measures layouts differently .*scale\.train\.seed"):
        _search(other_seed, url, "place_s1", FakeTraining(), results_from=["grid"])
    with pytest.raises(HlnasError, match="nope"):
        _search(_space(["front"]), url, "place", FakeTraining(), results_from=["nope"])
    assert optuna.get_all_study_names(url) == ["grid"]  # neither refused search left a study behind


def test_the_sources_are_stored_so_a_resume_adopts_from_them(tmp_path):
    url = f"sqlite:///{tmp_path}/s.db"
    _search(_space(["paper"], name="grid"), url, "grid", FakeTraining())
    first, second = FakeTraining(), FakeTraining()
    space = _space(["paper", "front"], name="place")
    _search(space, url, "place", first, results_from=["grid"], n_trials=1)
    # a resume that does not name the source again: the stored one still adopts the paper cells it meets
    place = _search(None, url, "place", second, resume=True, n_trials=4)
    assert sorted(first.trained + second.trained) == ["AAHHHH", "AHHHHH"]
    assert sorted(t.user_attrs["layout"] for t in place.trials if "result_from" in t.user_attrs) == ["HHAHHA", "HHHHHA"]
    assert place.user_attrs[RESULTS_FROM_ATTR] == ["grid"]


def test_status_marks_the_adopted_trials_and_counts_them_apart_from_the_trained(tmp_path, capsys):
    import json

    from hlnas.cli.main import main

    url = f"sqlite:///{tmp_path}/s.db"
    grid = _search(_space(["paper"], name="grid"), url, "grid", FakeTraining())
    place = _search(_space(["paper", "front"], name="place"), url, "place", FakeTraining(), results_from=["grid"])
    source = {t.user_attrs["layout"]: t.number for t in grid.trials}
    own = {t.user_attrs["layout"]: t.number for t in place.trials}
    assert main(["status", "--storage", url, "--study", "place"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("study 'place': 4 complete (2 trained, 2 adopted from grid)")
    rows = {l.split()[1]: l for l in out.splitlines() if re.match(r"\s+\d+\s+[AH]{6}\s", l)}
    assert set(rows) == {"HHAHHA", "HHHHHA", "AAHHHH", "AHHHHH"}  # every layout is on this toy front
    for layout in ("HHAHHA", "HHHHHA"):  # adopted: the row names the trial that measured it
        assert rows[layout].split()[0] == str(own[layout])
        assert rows[layout].endswith(f"  (result of grid#{source[layout]})")
    for layout in ("AAHHHH", "AHHHHH"):  # trained here: no marker
        assert "result of" not in rows[layout] and re.search(r"[\d,]+$", rows[layout])
    assert main(["status", "--storage", url, "--study", "place", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["origins"] == {"trained": 2, "adopted": 2, "adopted_from": ["grid"]}
    assert {r["layout"]: r["result_from"] for r in d["front"]} == {
        "HHAHHA": f"grid#{source['HHAHHA']}", "HHHHHA": f"grid#{source['HHHHHA']}", "AAHHHH": None, "AHHHHH": None}
    # a study that adopted nothing prints its counts as before
    assert main(["status", "--storage", url, "--study", "grid"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("study 'grid': 2 complete (target 10 trials)\n") and "result of" not in out
