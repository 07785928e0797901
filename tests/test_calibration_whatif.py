"""``hlnas status --as-if calibration.KEY=VALUE``: the stored calibration runs judged under other thresholds, printed
beside the stored verdict and never stored."""

from __future__ import annotations

import json

import optuna
import pytest

from hlnas.cli.main import main
from hlnas.search import executors
from hlnas.space import space_from_dict
from hlnas.search.study import run_search
from hlnas.search.options import SearchOptions
from tests.searches import fake_trial, raw_space


@pytest.fixture
def calibrated(monkeypatch, tmp_path) -> str:
    """A valid calibration whose HGRN pure model (0.975) sits within twice the spread floor of its hybrid (0.98)."""
    run, _ = fake_trial({("HHHHHH", 0): 0.975, ("HHHHHH", 1): 0.975})
    monkeypatch.setattr(executors, "run_trial", run)
    url = f"sqlite:///{tmp_path}/c.db"
    study = run_search(space_from_dict(raw_space()), SearchOptions(storage=url, study_name="c", n_trials=7))
    assert study.user_attrs["hlnas_calibration"]["status"] == "valid"
    return url


def test_as_if_judges_the_stored_runs_under_other_thresholds_and_stores_nothing(calibrated, capsys):
    status = ["status", "--storage", calibrated, "--study", "c"]
    stored = optuna.load_study(study_name="c", storage=calibrated).user_attrs["hlnas_calibration"]
    assert main([*status, "--as-if", "calibration.pure_below_min_mixers=2"]) == 0
    out = capsys.readouterr().out
    head = next(line for line in out.splitlines() if line.startswith("AS IF"))
    assert head.startswith("AS IF calibration.pure_below_min_mixers=2 (judged from the 10 stored runs; printed only")
    assert "NOT valid: " in head and "for 1 mixer(s) (gla); calibration.pure_below_min_mixers=2" in head
    assert "valid: yes" in out.split("AS IF")[0]  # the stored verdict, printed first, still valid

    assert main([*status, "--as-if", "calibration.pure_below_min_mixers=1"]) == 0
    assert "stored verdict is unchanged): valid\n" in capsys.readouterr().out
    assert main([*status, "--as-if", "calibration.control_min=0.995", "--as-if", "calibration.spread_floor=0.02"]) == 0
    head = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("AS IF"))
    assert head.startswith("AS IF calibration.control_min=0.995, calibration.spread_floor=0.02")
    assert "the all-attention control AAAAAA reached 0.990 raw recall" in head
    # VALUE is read as --set reads it: 9e-1 is the number 0.9 (plain YAML would read the string "9e-1")
    assert main([*status, "--as-if", "calibration.control_min=9e-1"]) == 0
    assert "AS IF calibration.control_min=0.9 (judged" in capsys.readouterr().out
    assert main([*status, "--json", "--as-if", "calibration.pure_below_min_mixers=2"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["as_if"]["changes"] == {"pure_below_min_mixers": 2} and got["as_if"]["verdict"]["valid"] is False
    assert optuna.load_study(study_name="c", storage=calibrated).user_attrs["hlnas_calibration"] == stored


@pytest.mark.parametrize(("item", "message"), [
    ("calibration.seeds=3", "expected calibration.KEY=VALUE with KEY one of control_min, spread_floor, "
                            "pure_below_min_mixers, graded_min_mixers"),
    ("pure_below_min_mixers=2", "expected calibration.KEY=VALUE"),
    ("calibration.control_min", "expected calibration.KEY=VALUE"),
    ("calibration.control_min=1.5", "calibration.control_min=1.5 is not allowed; allowed: a fraction in [0, 1]"),
    ("calibration.graded_min_mixers=two", "calibration.graded_min_mixers is an integer; got 'two'"),
])
def test_a_bad_as_if_is_a_one_line_error(calibrated, capsys, item, message):
    assert main(["status", "--storage", calibrated, "--study", "c", "--as-if", item]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_as_if_on_a_study_without_calibration_runs_says_so(monkeypatch, tmp_path, capsys):
    run, _ = fake_trial({})
    monkeypatch.setattr(executors, "run_trial", run)
    url = f"sqlite:///{tmp_path}/s.db"
    run_search(space_from_dict(raw_space()), SearchOptions(
        storage=url, study_name="s", n_trials=1, skip_calibration=True))
    assert main(["status", "--storage", url, "--study", "s", "--as-if", "calibration.control_min=0.5"]) == 2
    assert "no stored calibration runs to judge (calibration skipped)" in capsys.readouterr().err
