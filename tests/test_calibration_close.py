"""``hlnas calibrate --close REASON``: a calibration given up for a reason outside its own runs (a probe ruled the
protocol out) says so in ``hlnas status`` and is neither continued by ``hlnas calibrate`` nor searched."""

from __future__ import annotations

import optuna
import pytest
import yaml

from hlnas.calibration.protocol import CalibrationFailed
from hlnas.cli.main import main
from hlnas.space import space_from_dict
from hlnas.search.study import run_search
from hlnas.search.options import SearchOptions
from tests.searches import interrupted_calibration, raw_space

REASON = "pure DeltaNet learns VT-16 alone (probe of 2026-12-04)"


def test_a_closed_calibration_shows_its_reason_and_is_never_continued_or_searched(monkeypatch, tmp_path, capsys):
    url, calls = interrupted_calibration(monkeypatch, tmp_path)
    space_file = tmp_path / "cal.yaml"
    space_file.write_text(yaml.safe_dump(raw_space()))
    assert main(["calibrate", str(space_file), "--storage", url, "--study", "c", "--close", f"  {REASON} "]) == 0
    assert f"closed the calibration of study 'c' (3 runs stored): {REASON}" in capsys.readouterr().out
    stored = optuna.load_study(study_name="c", storage=url).user_attrs["hlnas_calibration"]
    assert stored["status"] == "closed" and stored["reason"] == REASON and len(stored["runs"]) == 3

    assert main(["status", "--storage", url, "--study", "c"]) == 0
    out = capsys.readouterr().out
    assert "calibration: CLOSED on " in out and f"with 3 runs stored: {REASON}" in out
    assert "can still pass" not in out

    calls.clear()
    assert main(["calibrate", str(space_file), "--storage", url, "--study", "c", "--workers", "1"]) == 1
    err = capsys.readouterr().err
    assert "the calibration of study 'c' was closed on " in err and f"3 runs stored: {REASON}" in err
    assert "new --study" in err and "--timeout" not in err
    with pytest.raises(CalibrationFailed, match="was closed on .* with 3 runs stored: pure DeltaNet learns"):
        run_search(None, SearchOptions(storage=url, study_name="c", n_trials=7, resume=True))
    assert calls == []  # nothing trained: no control run continued, no trial
    assert len(optuna.load_study(study_name="c", storage=url).user_attrs["hlnas_calibration"]["runs"]) == 3


def test_close_refuses_what_is_not_a_running_calibration_and_an_empty_reason(monkeypatch, tmp_path, capsys):
    url, _ = interrupted_calibration(monkeypatch, tmp_path)
    space_file = tmp_path / "cal.yaml"
    space_file.write_text(yaml.safe_dump(raw_space()))
    close = ["calibrate", str(space_file), "--storage", url, "--close"]
    assert main([*close, "  ", "--study", "c"]) == 2
    assert "--close needs a reason" in capsys.readouterr().err
    assert optuna.load_study(study_name="c", storage=url).user_attrs["hlnas_calibration"]["status"] == "running"
    run_search(space_from_dict(raw_space()), SearchOptions(
        storage=url, study_name="s", n_trials=1, skip_calibration=True))
    assert main([*close, REASON, "--study", "s"]) == 2
    assert "study 's': its calibration is skipped; only a running calibration can be closed" in capsys.readouterr().err
    assert main([*close, REASON, "--study", "c"]) == 0
    assert main([*close, REASON, "--study", "c"]) == 2  # closed once is closed
    assert "its calibration is closed; only a running calibration" in capsys.readouterr().err
