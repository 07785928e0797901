"""Calibration across studies and in hlnas status (fake trials): --calibrated-by borrows a valid calibration of the
same protocol and refuses any other; the status of a running, failed or stopped calibration says where it stands and
why. The search's own calibration step: tests/test_calibration_search.py."""

from __future__ import annotations

import re
import optuna
import pytest
from hlnas.cli.main import main
from hlnas.errors import ConfigError
from hlnas.search import executors
from hlnas.search.study import run_search
from hlnas.search.options import SearchOptions
from hlnas.space import space_from_dict
from tests.searches import fake_trial, raw_space
from tests.test_calibrate import GOOD, runs_of
from tests.test_calibration_search import calibrate_cli


def study_names_of(url: str) -> list[str]:
    return [s.study_name for s in optuna.get_all_study_summaries(url, include_best_trial=False)]


def test_calibrated_by_borrows_a_valid_calibration_of_the_same_protocol_and_refuses_any_other(monkeypatch, tmp_path,
                                                                                             capsys):
    """A grid's second seed (--set train.seed=1) and a placement study over some of its mixers run the grid's recall
    protocol: --calibrated-by stores the grid's verdict as theirs (marked borrowed) and trains no control; a study whose
    protocol, mixers or status differ is refused in one line naming why, with nothing trained."""
    from hlnas.errors import HlnasError

    run, calls = fake_trial({})
    monkeypatch.setattr(executors, "run_trial", run)
    url = f"sqlite:///{tmp_path}/c.db"
    run_search(space_from_dict(raw_space()), SearchOptions(storage=url, study_name="grid", n_trials=7))
    calls.clear()

    seed1 = space_from_dict(raw_space()).with_sets(["train.seed=1"])
    events = []
    s1 = run_search(seed1, SearchOptions(
        storage=url, study_name="grid_s1", n_trials=3, calibrated_by="grid",
        on_event=lambda k, d: events.append((k, d))))
    assert not any(c[0] < 0 for c in calls) and len(calls) == 3  # three search trials, no control run
    assert all(c[2] == 1 for c in calls)  # on seed 1
    cal = s1.user_attrs["hlnas_calibration"]
    grid_cal = optuna.load_study(study_name="grid", storage=url).user_attrs["hlnas_calibration"]
    assert cal == {"status": "valid", "verdict": grid_cal["verdict"], "borrowed_from": {"study": "grid"}}
    assert any(k == "calibration" and d.get("borrowed_from") == "grid" for k, d in events)
    calls.clear()  # a resume keeps the borrowed verdict without the option
    run_search(None, SearchOptions(storage=url, study_name="grid_s1", n_trials=4, resume=True))
    assert len(calls) == 1 and not any(c[0] < 0 for c in calls)

    place = space_from_dict(raw_space(mixers=["hgrn"], placements=["front"], sampler="random"))
    assert run_search(place, SearchOptions(storage=url, study_name="place", n_trials=1, calibrated_by="grid")) \
        .user_attrs["hlnas_calibration"]["borrowed_from"] == {"study": "grid"}

    calls.clear()
    refusals = [
        (raw_space(), "nowhere", "Available: grid, grid_s1, place, place_skip"),
        (raw_space(name="x"), "place_skip", "calibration is skipped, not valid"),
        (raw_space(scale={**raw_space()["scale"], "score": {"objectives": ["val_loss", "mqar"], "mqar": {"steps": 7}}}),
         "grid", "its recall protocol differs from this space's, so its controls do not vouch for it: scale.score.mqar.steps"),
        (raw_space(mixers=["gla", "deltanet"]), "grid", "it did not calibrate mixer(s) deltanet (it has gla, hgrn)"),
    ]
    run_search(space_from_dict(raw_space()), SearchOptions(
        storage=url, study_name="place_skip", n_trials=1, skip_calibration=True))
    calls.clear()
    for i, (raw, source, want) in enumerate(refusals):
        with pytest.raises(HlnasError, match=re.escape(want)):
            run_search(space_from_dict(raw), SearchOptions(
                storage=url, study_name=f"r{i}", n_trials=1, calibrated_by=source))
    with pytest.raises(HlnasError, match="has a calibration of its own"):
        run_search(None, SearchOptions(
            storage=url, study_name="grid", n_trials=7, resume=True, calibrated_by="grid_s1"))
    with pytest.raises(ConfigError, match="--calibrated-by takes a study name and excludes --calibrate"):
        run_search(space_from_dict(raw_space()), SearchOptions(
            storage=url, study_name="z", n_trials=1, calibrated_by="grid", skip_calibration=True))
    assert calls == [] and not any(f"r{i}" in n for n in study_names_of(url) for i in range(4))  # nothing created
    assert main(["search", "--storage", url, "--study", "grid_s1", "--resume", "--no-progress", "--workers", "1",
                 "--trials", "4"]) == 0
    assert "unvalidated" not in capsys.readouterr().out


def test_status_of_a_running_calibration_shows_its_rows_so_far_and_whether_it_can_still_pass(tmp_path):
    """hlnas status on a calibration split over several GPU calls: how many runs of the plan are stored, the rows so
    far (no 'valid' line), which mixers can still have their pure model below the hybrid, and a certain failure."""
    from hlnas.cli.console import status_text
    from hlnas.search.study import study_summary

    url = f"sqlite:///{tmp_path}/c.db"
    space = space_from_dict(raw_space(calibration={"pure_below_min_mixers": 2}))

    def study_with(name, values):
        st = optuna.create_study(study_name=name, storage=url, directions=["maximize", "minimize", "minimize"])
        st.set_user_attr("hlnas_space", space.to_dict())
        st.set_user_attr("hlnas_objectives", [o.to_dict() for o in space.objectives])
        st.set_user_attr("hlnas_calibration", {"status": "running", "runs": runs_of(values)})
        return status_text(study_summary(st))

    text = study_with("a", {"control:transformer": (0.99, 0.97), "pure:gla": (0.30,)})
    assert "calibration: running, 3 of 10 runs stored" in text and "no verdict yet" in text and "valid: " not in text
    assert "pure     gla             GGGGGG                     0.300" in text
    assert "pure below its hybrid can still hold for 2 mixer(s) (gla, hgrn); the space asks 2" in text
    assert "the graded measure can still rise" not in text  # the space asks no graded mixers
    assert "can still pass: nothing stored so far rules it out" in text
    text = study_with("b", {"control:transformer": (0.99, 0.97), "pure:gla": (0.995,)})
    assert "can still hold for 1 mixer(s) (hgrn)" in text
    assert "CANNOT PASS any more: the pure model can sit below its 3:1 hybrid for at most 1 mixer(s) (hgrn)" in text


def test_status_of_a_failed_calibration_says_why_and_what_to_change(tmp_path):
    """A verdict read back later (hlnas status) carries what hlnas calibrate printed when it failed: the failures and
    the settings to change; a valid one, and a borrowed one (the other study says why), print neither."""
    from hlnas.calibration.protocol import advice, verdict
    from hlnas.cli.console import status_text
    from hlnas.search.study import study_summary

    url = f"sqlite:///{tmp_path}/c.db"
    space = space_from_dict(raw_space())

    def status(name, values, **extra):
        v = verdict(space, runs_of(values))
        st = optuna.create_study(study_name=name, storage=url, directions=["maximize", "minimize", "minimize"])
        st.set_user_attr("hlnas_space", space.to_dict())
        st.set_user_attr("hlnas_objectives", [o.to_dict() for o in space.objectives])
        st.set_user_attr("hlnas_calibration", {"status": "valid" if v["valid"] else "invalid", "verdict": v, **extra})
        return v, status_text(study_summary(st))

    v, text = status("bad", {**GOOD, "control:transformer": (0.99, 0.50)})
    assert not v["valid"] and "why not valid:" in text
    assert f"  - {v['failures'][0]}" in text and "0.500" in v["failures"][0]
    assert f"change: {advice(space, v)}" in text and "score.mqar.steps" in text
    assert "why not valid" not in status("good", GOOD)[1]
    assert "why not valid" not in status("lent", {**GOOD, "control:transformer": (0.99, 0.50)},
                                         borrowed_from={"study": "other"})[1]


def test_a_separation_that_failed_for_good_stops_the_calibration_but_not_one_that_may_still_pass():
    """RetNet on MQAR at batch 64 learned on one seed and not the other: a spread that wide separates the pure model
    from neither its baseline nor its hybrid. Once the row and its partner have every seed scored, the verdict cannot
    be valid (hopeless says so); while the partner lacks a seed, or a seed failed to run, it can."""
    from hlnas.calibration.protocol import hopeless

    space = space_from_dict(raw_space())
    base = {**GOOD, "pure:gla": (0.98, 0.26)}  # one seed learned, the other did not: spread 0.72
    assert "gla pure (GGGGGG) scored 0.620 (seeds 0.980, 0.260)" in hopeless(space, runs_of(base))
    partial = runs_of({**base, "hybrid:gla": (0.98,)})
    assert hopeless(space, partial) is None  # the hybrid's seed 1 is still to come
    crashed = runs_of(base)
    crashed["hybrid:gla:s1"] = {**crashed["hybrid:gla:s1"], "status": "failed", "raw_train_length": None}
    assert hopeless(space, crashed) is None  # a failed run may run again
    assert hopeless(space, runs_of(GOOD)) is None


def test_a_calibration_stopped_by_a_failed_separation_advises_on_separation_not_on_the_control(monkeypatch, tmp_path,
                                                                                                capsys):
    # pure GLA learns on seed 0 only; its hybrid learns on both: once all four are stored nothing else starts
    rc, err, calls, cal = calibrate_cli(monkeypatch, tmp_path, capsys, {("GGGGGG", 0): 0.98, ("GGGGGG", 1): 0.26})
    assert rc == 1 and "gla pure (GGGGGG) scored 0.620 (seeds 0.980, 0.260)" in err and "cannot pass" in err
    v = cal["verdict"]
    assert "separation" in v["kinds"] and "stopped" in v["kinds"] and len(calls) < 10
    assert "to separate the candidates" in err and "train longer or sweep learning rates" not in err
