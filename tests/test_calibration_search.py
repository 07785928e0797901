"""Calibration inside the search (fake trials): it runs first, its seed-0 runs become trials, an invalid protocol
refuses the search, interrupted and out-of-time calibrations resume, --drain, --calibrated-by, and hlnas status of
a calibration. The plan and the verdict's rules: tests/test_calibrate.py."""

from __future__ import annotations

import shlex

import optuna
import pytest
from optuna.trial import TrialState

from hlnas.calibration.protocol import CalibrationFailed
from hlnas.cli.main import main
from hlnas.search import executors
from hlnas.search.study import run_search
from hlnas.search.options import SearchOptions
from hlnas.search.trial import TrialResult
from hlnas.space import space_from_dict
from tests.searches import fake_trial, interrupted_calibration, raw_space

# -- the search's calibration step, with fake trials ----------------------------------------------------------------
def test_search_calibrates_first_and_reuses_seed_0_runs_as_trials(monkeypatch, tmp_path):
    run, calls = fake_trial({})
    monkeypatch.setattr(executors, "run_trial", run)
    url = f"sqlite:///{tmp_path}/c.db"
    events = []
    study = run_search(space_from_dict(raw_space()), SearchOptions(
        storage=url, study_name="c", n_trials=7, on_event=lambda k, d: events.append(k)))
    assert events.index("calibration") < events.index("started")
    cal_calls = [c for c in calls if c[0] < 0]
    assert len(cal_calls) == 10
    # both seeds' controls start first (a calibration over several GPU calls learns soonest whether it can pass),
    # then the pure models
    assert [c[1] for c in cal_calls[:2]] == ["AAAAAA", "AAAAAA"]
    assert {c[1] for c in cal_calls[2:6]} == {"GGGGGG", "HHHHHH"}
    # seed-1 controls need only the fresh-model recall (no LM training), seed-0 ones are whole trials
    assert all(c[3] for c in cal_calls if c[2] == 1) and not any(c[3] for c in cal_calls if c[2] == 0)
    done = [t for t in study.get_trials(states=(TrialState.COMPLETE,)) if "reused_from" not in t.user_attrs]
    assert len(done) == 7 and len({t.user_attrs["layout"] for t in done}) == 7
    assert {t.user_attrs["layout"] for t in done if "calibration" in t.user_attrs} == {"AAAAAA", "GGGGGG", "GGAGGA", "HHHHHH", "HHAHHA"}
    assert len([c for c in calls if c[0] >= 0]) == 2  # the search trained only the two 6:1 layouts itself
    cal = study.user_attrs["hlnas_calibration"]
    assert cal["status"] == "valid" and cal["verdict"]["valid"] and len(cal["runs"]) == 10
    t = next(t for t in done if t.user_attrs["layout"] == "GGAGGA")
    assert t.user_attrs["recall_raw"] == pytest.approx(0.98) and t.user_attrs["recall_baseline"] == 0.25
    assert t.values[0] == pytest.approx((0.98 - 0.25) / 0.75)  # the study optimises the corrected recall

    calls.clear()  # resume: the stored calibration is reused, nothing is trained again
    run_search(None, SearchOptions(
        storage=url, study_name="c", n_trials=7, resume=True, on_event=lambda k, d: events.append((k, d))))
    assert calls == [] and any(e[0] == "calibration" and e[1].get("reused") for e in events if isinstance(e, tuple))


def test_invalid_protocol_refuses_to_search_and_keeps_the_controls(monkeypatch, tmp_path):
    run, calls = fake_trial({("AAAAAA", 0): 0.3, ("AAAAAA", 1): 0.31})
    monkeypatch.setattr(executors, "run_trial", run)
    url = f"sqlite:///{tmp_path}/c.db"
    with pytest.raises(CalibrationFailed) as e:
        run_search(space_from_dict(raw_space()), SearchOptions(storage=url, study_name="c", n_trials=7))
    msg = str(e.value)
    assert "the all-attention control AAAAAA reached 0.300 raw recall at the training length" in msg
    assert "0.600 short of calibration.control_min=0.9" in msg and "score.mqar.steps" in msg and "--skip-calibration" in msg
    assert not any(c[0] >= 0 for c in calls)  # no search trial
    study = optuna.load_study(study_name="c", storage=url)
    assert study.user_attrs["hlnas_calibration"]["status"] == "invalid"
    # one run at a time: the control's seed 0 failed first, and no other run started (its trial is kept)
    assert len(study.get_trials(states=(TrialState.COMPLETE,))) == 1 and len(calls) == 1
    # --skip-calibration searches anyway on a new study
    s = run_search(space_from_dict(raw_space()), SearchOptions(
        storage=url, study_name="d", n_trials=2, skip_calibration=True))
    assert s.user_attrs["hlnas_calibration"] == {"status": "skipped"}


def test_an_interrupted_calibration_resumes_with_the_missing_runs(monkeypatch, tmp_path):
    url, calls = interrupted_calibration(monkeypatch, tmp_path)
    stored = optuna.load_study(study_name="c", storage=url).user_attrs["hlnas_calibration"]
    assert stored["status"] == "running" and len(stored["runs"]) == 3
    calls.clear()
    study = run_search(None, SearchOptions(storage=url, study_name="c", n_trials=7, resume=True))
    assert len([c for c in calls if c[0] < 0]) == 7 and study.user_attrs["hlnas_calibration"]["status"] == "valid"


def test_hlnas_calibrate_then_hlnas_search_continue_one_study(monkeypatch, tmp_path, capsys):
    run, calls = fake_trial({})
    monkeypatch.setattr(executors, "run_trial", run)
    import yaml

    space_file = tmp_path / "cal.yaml"
    space_file.write_text(yaml.safe_dump(raw_space()))
    url = f"sqlite:///{tmp_path}/c.db"
    assert main(["calibrate", str(space_file), "--storage", url, "--workers", "1"]) == 0
    out = capsys.readouterr()
    assert "valid: yes" in out.err + out.out and "hlnas search --space" in out.out
    n = len(calls)
    assert main(["search", "--space", str(space_file), "--storage", url, "--workers", "1", "--no-progress"]) == 0
    assert len([c for c in calls[n:] if c[0] < 0]) == 0  # calibration reused
    assert "no-rec." in capsys.readouterr().out


def test_a_search_resumed_after_hlnas_calibrate_trains_the_layouts_the_calibration_did_not(monkeypatch, tmp_path):
    """hlnas calibrate creates the study; h200.sh's grid then runs `hlnas search --resume` with no --trials, which
    continues to the study's stored target. The calibration stored its own internal target (1 trial) there, so the
    resumed grid would have trained nothing (2026-12-04: paper_grid_h200_lr held hlnas_trials=1 with 19 trials done)."""
    run, calls = fake_trial({})
    monkeypatch.setattr(executors, "run_trial", run)
    import yaml

    space_file = tmp_path / "cal.yaml"
    space_file.write_text(yaml.safe_dump(raw_space(ratios=["pure", "6:1", "3:1", "2:1"])))
    url = f"sqlite:///{tmp_path}/c.db"
    assert main(["calibrate", str(space_file), "--storage", url, "--workers", "1"]) == 0
    study = optuna.load_study(study_name="cal", storage=url)
    assert "hlnas_trials" not in study.user_attrs and len(study.trials) == 5  # the control, pure and 3:1 at seed 0
    n = len(calls)
    assert main(["search", "--resume", "--study", "cal", "--storage", url, "--workers", "1", "--no-progress"]) == 0
    trained = [c[1] for c in calls[n:]]
    assert sorted(trained) == ["GAGAGA", "GGGGGA", "HAHAHA", "HHHHHA"]  # 2:1 and 6:1 of each mixer, nothing else


def test_hlnas_calibrate_exits_1_on_an_invalid_protocol(monkeypatch, tmp_path, capsys):
    run, _ = fake_trial({("AAAAAA", 0): 0.3, ("AAAAAA", 1): 0.3})
    monkeypatch.setattr(executors, "run_trial", run)
    import yaml

    space_file = tmp_path / "cal.yaml"
    space_file.write_text(yaml.safe_dump(raw_space()))
    assert main(["calibrate", str(space_file), "--storage", f"sqlite:///{tmp_path}/c.db", "--workers", "1"]) == 1
    err = capsys.readouterr().err
    assert "failed its controls" in err and "valid: NO" in err


def test_calibrate_study_returns_the_verdict_and_the_failure_and_refuses_a_space_without_recall(monkeypatch, tmp_path):
    from hlnas.errors import HlnasError
    from hlnas.search.study import calibrate_study

    run, _ = fake_trial({("AAAAAA", 0): 0.3, ("AAAAAA", 1): 0.3})
    monkeypatch.setattr(executors, "run_trial", run)
    url = f"sqlite:///{tmp_path}/c.db"
    verdict, message = calibrate_study(space_from_dict(raw_space()), storage=url, study_name="c", workers=1)
    assert verdict["valid"] is False and "failed its controls" in message and verdict["failures"][0] in message
    with pytest.raises(HlnasError, match="nothing to calibrate"):
        calibrate_study(space_from_dict(raw_space(calibration={"enabled": False})), storage=url, study_name="d")


def test_a_calibration_out_of_time_pauses_its_runs_and_the_next_call_continues_them(monkeypatch, tmp_path, capsys):
    """--timeout: no run starts after it, a run in flight pauses (its recall model kept in the study's folder of
    paused runs), the command exits 3; the same command again continues the paused run and stores the verdict."""
    import os
    import time

    import yaml

    run, calls = fake_trial({})
    continued = []

    started = []

    def slow(spec):  # the second run trains past its pause_by and pauses there, keeping a state file
        assert spec.state_dir is not None  # every run can be continued where it stopped
        started.append(spec.number)
        if os.path.exists(os.path.join(spec.state_dir, "state")):
            continued.append(spec.number)
        if len(started) == 2 and spec.pause_by is not None:
            time.sleep(max(0.0, spec.pause_by - time.time()) + 0.05)
        if spec.pause_by is not None and time.time() >= spec.pause_by:
            os.makedirs(spec.state_dir, exist_ok=True)
            open(os.path.join(spec.state_dir, "state"), "w").close()
            return TrialResult(spec.number, "paused", {"status": "paused", "mqar_steps_done": 7})
        return run(spec)

    monkeypatch.setattr(executors, "run_trial", slow)
    monkeypatch.chdir(tmp_path)  # the default folder of paused runs is ./hlnas-rungs
    space_file = tmp_path / "cal.yaml"
    space_file.write_text(yaml.safe_dump(raw_space()))
    url = f"sqlite:///{tmp_path}/c.db"
    cmd = ["calibrate", str(space_file), "--storage", url, "--workers", "1", "--set", "train.seed=0"]
    assert main(cmd + ["--timeout", "3"]) == 3
    out = capsys.readouterr()
    assert "paused    at step 7" in out.err and "continue with: hlnas calibrate" in out.err, out.err
    # the command it prints is the one that continues: the same space with the same overrides
    assert shlex.split(out.err.split("continue with: ")[1].splitlines()[0])[1:] == cmd[:4] + ["--study", "cal"] + cmd[6:]
    study = optuna.load_study(study_name="cal", storage=url)
    cal = study.user_attrs["hlnas_calibration"]
    assert cal["status"] == "running" and len(cal["runs"]) == 1  # the second run paused, none started after it
    stored_numbers = [c[0] for c in calls]  # the fake's calls: only the stored run reached it
    root = study.user_attrs["hlnas_rung_root"]
    assert len(os.listdir(os.path.join(root, "calibration"))) == 1
    assert not study.get_trials(states=(TrialState.RUNNING,))  # nothing left RUNNING for a resume to re-queue

    assert main(cmd) == 0  # continued without a limit: the paused run first, then the rest
    assert len(continued) == 1 and continued[0] not in stored_numbers
    cal = optuna.load_study(study_name="cal", storage=url).user_attrs["hlnas_calibration"]
    assert cal["status"] == "valid" and len(cal["runs"]) == 10
    assert os.listdir(os.path.join(root, "calibration")) == []  # a stored run's paused state is removed


def calibrate_cli(monkeypatch, tmp_path, capsys, scores: dict, **space):
    """``hlnas calibrate`` of ``raw_space(**space)`` on one worker whose fake trials score ``scores``
    (:func:`fake_trial`): its exit code, stderr, the fake's calls and the stored calibration."""
    import yaml

    run, calls = fake_trial(scores)
    monkeypatch.setattr(executors, "run_trial", run)
    space_file = tmp_path / "cal.yaml"
    space_file.write_text(yaml.safe_dump(raw_space(**space)))
    url = f"sqlite:///{tmp_path}/c.db"
    rc = main(["calibrate", str(space_file), "--storage", url, "--workers", "1"])
    cal = optuna.load_study(study_name="cal", storage=url).user_attrs["hlnas_calibration"]
    return rc, capsys.readouterr().err, calls, cal


def test_a_failed_control_stops_the_calibration_before_the_runs_that_cannot_change_the_verdict(monkeypatch, tmp_path,
                                                                                                  capsys):
    """control_min is asked of every seed, so once a control seed scores below it the verdict is decided: no more
    runs start (those in flight finish and are stored), the verdict is stored invalid with that reason first and the
    untrained runs not called failures, and the search refuses to start, naming the control."""
    # the control's seed 1 stays near the baseline (0.25)
    rc, err, calls, cal = calibrate_cli(monkeypatch, tmp_path, capsys, {("AAAAAA", 1): 0.4})
    assert rc == 1
    space_file, url = tmp_path / "cal.yaml", f"sqlite:///{tmp_path}/c.db"
    assert "control AAAAAA reached 0.400 raw recall at the training length on seed 1" in err
    assert "cannot pass: 8 runs not started" in err
    assert len(calls) == 2  # the two control seeds (run first), nothing after
    v = cal["verdict"]
    assert cal["status"] == "invalid" and len(cal["runs"]) == 2 and v["valid"] is False
    assert v["kinds"] == ["control", "stopped"] and v["failures"][0].startswith("the all-attention control")
    assert "the 8 runs not stored were not trained" in v["failures"][0]
    assert not any("seeds scored" in f for f in v["failures"])  # the runs never started are not failures
    # the stored verdict is final: a search on the study refuses at once, training nothing
    assert main(["search", "--space", str(space_file), "--storage", url, "--study", "cal", "--resume",
                 "--workers", "1", "--no-progress"]) != 0
    assert len(calls) == 2 and "train longer or sweep learning rates" in capsys.readouterr().err


def test_hopeless_counts_only_a_scored_control_below_control_min():
    from hlnas.calibration.protocol import hopeless

    space = space_from_dict(raw_space())
    ok = {"key": "control:transformer:s0", "role": "control", "mixer": "transformer", "status": "ok",
          "raw_train_length": 0.95, "baseline_train_length": 0.25, "layout": "AAAAAA", "seed": 0}
    crashed = {**ok, "key": "control:transformer:s1", "status": "failed", "raw_train_length": None, "seed": 1}
    pure = {**ok, "key": "pure:gla:s0", "role": "pure", "mixer": "gla", "raw_train_length": 0.1, "layout": "GGGGGG"}
    assert hopeless(space, {r["key"]: r for r in (ok, crashed, pure)}) is None
    low = {**ok, "raw_train_length": 0.5}
    assert "control AAAAAA reached 0.500 raw recall at the training length on seed 0, 0.400 short of" in hopeless(
        space, {low["key"]: low})


def test_drain_lets_the_run_in_flight_at_the_timeout_finish_instead_of_pausing(monkeypatch, tmp_path, capsys):
    """--drain: no run starts after --timeout, but the one in flight goes on past it and is stored (a machine that
    goes back takes paused runs with it); without --drain the same run pauses (the test above)."""
    import time

    import yaml

    run, calls = fake_trial({})
    seen, starts = [], []

    def slow(spec):  # the second run is still training when the timeout passes, and finishes 0.5 s after it
        seen.append(spec)
        starts.append(time.time())
        if len(seen) == 2:
            time.sleep(max(0.0, spec.pause_by - 10.0 - time.time()) + 0.5)
            assert time.time() < spec.pause_by  # inside the drain: it does not pause
        return run(spec)

    monkeypatch.setattr(executors, "run_trial", slow)
    monkeypatch.chdir(tmp_path)
    space_file = tmp_path / "cal.yaml"
    space_file.write_text(yaml.safe_dump(raw_space()))
    url = f"sqlite:///{tmp_path}/c.db"
    t0 = time.time()
    assert main(["calibrate", str(space_file), "--storage", url, "--workers", "1", "--timeout", "2",
                 "--drain", "10"]) == 3
    assert seen[0].pause_by - t0 >= 12 >= seen[0].pause_by - starts[0]  # the timeout plus the drain
    cal = optuna.load_study(study_name="cal", storage=url).user_attrs["hlnas_calibration"]
    assert cal["status"] == "running" and len(cal["runs"]) == len(seen) == 2  # the drained run stored, none after
    assert "2 of 10 runs stored, 0 paused" in capsys.readouterr().err


def test_a_search_with_drain_gives_its_trials_the_timeout_plus_the_drain_before_they_pause(monkeypatch, tmp_path):
    import time

    run, _ = fake_trial({})
    seen = []
    monkeypatch.setattr(executors, "run_trial", lambda spec: (seen.append((time.time(), spec.pause_by)), run(spec))[1])
    monkeypatch.chdir(tmp_path)
    t0 = time.time()
    run_search(space_from_dict(raw_space()), SearchOptions(
        storage=f"sqlite:///{tmp_path}/c.db", study_name="c", n_trials=1, skip_calibration=True, time_limit=30,
        drain=20))
    (started, pause_by), = seen
    assert pause_by - t0 >= 50 >= pause_by - started


@pytest.mark.parametrize("args, message", [(["--drain", "5"], "needs --timeout"),
                                           (["--timeout", "5", "--drain", "-1"], "--drain must be a number of seconds >= 0")])
def test_a_bad_drain_is_refused_before_anything_is_written(tmp_path, capsys, args, message):
    url = f"sqlite:///{tmp_path}/c.db"
    assert main(["search", "--space", "tiny", "--storage", url, *args]) != 0
    assert message in capsys.readouterr().err
    assert not (tmp_path / "c.db").exists() or not optuna.get_all_study_summaries(url)


def test_pure_below_ruled_out_never_rules_out_a_mixer_that_could_still_pass():
    """The bound behind stopping early: whatever the missing runs score, a mixer ruled out from part of its runs never
    passes "pure below its hybrid" in the full verdict. Checked on random completions near the ceiling (where the
    bound bites), for every subset of the stored runs."""
    import itertools
    import random

    from hlnas.calibration.protocol import pure_below_ruled_out, verdict

    space = space_from_dict(raw_space())
    cfg = space.calibration
    rng = random.Random(0)
    keys = [(role, s) for role in ("pure", "hybrid") for s in range(cfg.seeds)]
    seen_out = seen_pass = 0
    for _ in range(3000):
        vals = {k: min(1.0, rng.choice([rng.uniform(0.9, 1.0), rng.uniform(0.96, 1.0), 1.0 - rng.choice([0, 1, 2, 3]) * 0.005]))
                for k in keys}
        runs = {f"{role}:gla:s{s}": {"key": f"{role}:gla:s{s}", "role": role, "mixer": "gla", "seed": s, "status": "ok",
                                     "raw_train_length": v, "baseline_train_length": 0.25,
                                     "layout": "GGGGGG" if role == "pure" else "GGAGGA", "ratio": "pure" if role == "pure" else "3:1"}
                for (role, s), v in vals.items()}
        passes = verdict(space, runs)["mixers"]["gla"]["pure_below"]
        seen_pass += bool(passes)
        for n in range(len(runs) + 1):
            for subset in itertools.combinations(runs, n):
                why = pure_below_ruled_out("gla", {k: runs[k] for k in subset}, cfg)
                if why:
                    seen_out += 1
                    assert not passes, (vals, subset, why)
                if n == len(runs):  # every run in: ruled out exactly when the verdict says no
                    assert bool(why) == (not passes), (vals, why)
    assert seen_out > 1000 and seen_pass > 50  # both sides of the bound were exercised


def test_a_finished_pair_inside_the_spread_rules_the_mixer_out_below_the_ceiling():
    """VT at 8000 steps: pure and hybrid both stop at the 0.98 target, every pure seed a little below its hybrid's but
    the means not apart by twice the spread. Once the four runs are in, the mixer is out (hopeless counts it), though
    no seed is near 1 or above its hybrid; with a seed missing it is not."""
    from hlnas.calibration.protocol import pure_below_ruled_out

    cfg = space_from_dict(raw_space()).calibration
    runs = {f"{role}{s}": {"role": role, "mixer": "gla", "seed": s, "status": "ok", "raw_train_length": v}
            for role, vals in (("pure", (0.975, 0.98)), ("hybrid", (0.983, 0.99))) for s, v in enumerate(vals)}
    assert pure_below_ruled_out("gla", runs, cfg) == ("gla pure (0.975, 0.980) and its 3:1 hybrid (0.983, 0.990) are "
                                                      "+0.009 apart, not more than twice the seed spread (0.020)")
    assert pure_below_ruled_out("gla", {k: v for k, v in runs.items() if k != "hybrid1"}, cfg) is None


def test_calibration_stops_once_too_few_mixers_can_have_their_pure_model_below_the_hybrid(monkeypatch, tmp_path, capsys):
    """pure_below_min_mixers=2 of 2 mixers: pure GLA at 0.99 on seed 0 leaves at most 1 (a hybrid cannot beat it by
    twice the seed spread), so no run starts after it and the verdict names the check, with its own advice."""
    rc, err, calls, cal = calibrate_cli(monkeypatch, tmp_path, capsys, {("GGGGGG", 0): 0.99},
                                        calibration={"pure_below_min_mixers": 2})
    assert rc == 1 and len(calls) == 3  # both controls, then pure GLA seed 0; nothing after it
    assert "at most 1 mixer(s) (hgrn), where calibration.pure_below_min_mixers=2: gla pure scored 0.990 on seed 0, " \
           "within 0.015 of the ceiling 1" in err
    v = cal["verdict"]
    assert cal["status"] == "invalid" and v["kinds"] == ["pure_below", "stopped"]
    assert "to grade by attention share" in err and "train longer or sweep learning rates" not in err


def test_a_pure_seed_not_below_its_hybrid_rules_the_mixer_out():
    from hlnas.calibration.protocol import pure_below_ruled_out

    cfg = space_from_dict(raw_space()).calibration
    run = {"role": "pure", "mixer": "hgrn", "seed": 1, "status": "ok", "raw_train_length": 0.5}
    hyb = {**run, "role": "hybrid", "raw_train_length": 0.45}
    assert pure_below_ruled_out("hgrn", {"p": run}, cfg) is None  # 0.5 leaves room below 1
    assert pure_below_ruled_out("hgrn", {"p": run, "h": hyb}, cfg) == \
        "hgrn pure scored 0.500 on seed 1, not below its 3:1 hybrid's 0.450"
    assert pure_below_ruled_out("hgrn", {"p": run, "h": {**hyb, "status": "failed"}}, cfg) is None  # may run again
