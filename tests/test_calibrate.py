"""Calibration: the plan, the verdict's rules, and the search refusing an invalid protocol (fake trials:
the real protocol on CPU is tests/test_cli_search.py::test_plain_hlnas_search_is_the_main_job)."""

from __future__ import annotations

import re
import shlex

import optuna
import pytest
from optuna.trial import TrialState

from hlnas import calibrate
from hlnas.search import executors
from hlnas.calibrate import CalibrationFailed, plan, verdict
from hlnas.cli import main
from hlnas.errors import ConfigError
from hlnas.space import SpaceError, space_from_dict
from hlnas.search.study import run_search
from hlnas.search.trial import TrialResult
from tests.searches import fake_trial, interrupted_calibration, raw_space


def test_plan_covers_control_pure_and_hybrid_for_every_seed():
    s = space_from_dict(raw_space())
    runs = plan(s)
    assert [r.key for r in runs[:5]] == ["control:transformer:s0", "pure:gla:s0", "hybrid:gla:s0", "pure:hgrn:s0", "hybrid:hgrn:s0"]
    assert len(runs) == 10 and {r.seed for r in runs} == {0, 1}
    layouts = {r.key: r.layout for r in runs}
    assert layouts["control:transformer:s1"] == "AAAAAA" and layouts["hybrid:gla:s0"] == "GGAGGA"
    # seed-0 runs of layouts in the space carry their parameters (they become trials); seed 1 never does
    assert all(r.params is not None for r in runs if r.seed == 0) and all(r.params is None for r in runs if r.seed == 1)
    for r in runs[:5]:
        assert str(s.layout(r.params)) == r.layout


def test_plan_runs_controls_outside_the_space_without_making_them_trials():
    s = space_from_dict(raw_space(ratios=["pure", "6:1"], transformer=False))
    by_key = {r.key: r for r in plan(s)}
    assert by_key["hybrid:gla:s0"].params is None and by_key["control:transformer:s0"].params is None
    assert by_key["pure:gla:s0"].params == {"mixer": "gla", "ratio": "pure", "placement": "paper"}


def test_plan_names_a_hybrid_ratio_the_depth_cannot_hold():
    s = space_from_dict(raw_space(layers=4, ratios=["pure", "2:1"]))
    with pytest.raises(ConfigError, match=r"calibration.hybrid_ratio='3:1' needs a depth that is a multiple of 3; the space "
                                          r"has layers=4"):
        plan(s)
    assert len(plan(space_from_dict(raw_space(layers=4, ratios=["pure", "2:1"], calibration={"hybrid_ratio": "2:1"})))) == 10


@pytest.mark.parametrize(("cal", "message"), [
    ({"seeds": 1}, "calibration.seeds=1 is not allowed; allowed: an integer from 2 to 10"),
    ({"seeds": "two"}, "calibration.seeds is an integer; got 'two'"),
    ({"control_min": 1.5}, r"calibration.control_min=1.5 is not allowed; allowed: a fraction in \[0, 1\]"),
    ({"hybrid_ratio": "pure"}, "calibration.hybrid_ratio='pure' is not allowed; allowed: a ratio r:1"),
    ({"hybrid_ratio": "x"}, "calibration.hybrid_ratio='x' is not allowed; allowed: a ratio r:1"),
    ({"enabled": "yes"}, "calibration.enabled is true or false; got 'yes'"),
    ({"seed": 2}, "unknown calibration key 'seed'. Did you mean: seeds?"),
    ("on", "calibration must be a mapping"),
])
def test_bad_calibration_settings_name_the_key(cal, message):
    with pytest.raises(SpaceError, match=message):
        space_from_dict(raw_space(calibration=cal))


def summary(key: str, layout: str, raw: float, base: float = 0.25, status: str = "ok") -> dict:
    role, mixer, seed = key.split(":")
    return {"key": key, "role": role, "mixer": mixer, "layout": layout, "seed": int(seed[1:]), "status": status,
            "raw_train_length": raw if status == "ok" else None, "baseline_train_length": base}


def runs_of(values: dict) -> dict:
    """{'control:transformer': (s0, s1), ...} -> stored summaries."""
    s = space_from_dict(raw_space())
    layouts = {r.key.rsplit(":", 1)[0]: r.layout for r in plan(s)}
    out = {}
    for group, vals in values.items():
        for seed, v in enumerate(vals):
            out[f"{group}:s{seed}"] = summary(f"{group}:s{seed}", layouts[group], v)
    return out


GOOD = {"control:transformer": (0.99, 0.97), "pure:gla": (0.30, 0.32), "hybrid:gla": (0.98, 0.99),
        "pure:hgrn": (0.27, 0.29), "hybrid:hgrn": (0.95, 0.97)}


def test_verdict_valid_when_the_control_learns_and_everything_is_separated():
    v = verdict(space_from_dict(raw_space()), runs_of(GOOD))
    assert v["valid"] and not v["failures"]
    rows = {(r["role"], r["mixer"]): r for r in v["rows"]}
    assert rows[("pure", "gla")]["spread"] == pytest.approx(0.02) and rows[("pure", "gla")]["pure_below"]
    table = calibrate.format_table(v)
    assert "valid: yes" in table
    assert "pure below its hybrid in every seed, beyond 2x the seed spread (2 mixers): gla yes (+0.675), hgrn yes (+0.680)" in table


def test_a_vt_protocol_shows_each_rows_accuracy_by_hops_beside_its_baseline():
    runs = runs_of(GOOD)
    split = {"control:transformer": [(0.99, 0.98), (0.97, 0.96)], "hybrid:gla": [(0.98, 0.40), (0.96, 0.30)]}
    for group, seeds in split.items():
        for seed, (h0, h1) in enumerate(seeds):
            runs[f"{group}:s{seed}"]["mqar_by_hop"] = {
                "0": {"acc": h0, "n": 100, "baseline": 0.25, "baseline_name": "copy_any"},
                "1": {"acc": h1, "n": 100, "baseline": 0.25 + 0.01 * seed, "baseline_name": "copy_any"}}
    v = verdict(space_from_dict(raw_space()), runs)
    rows = {(r["role"], r["mixer"]): r for r in v["rows"]}
    assert rows[("hybrid", "gla")]["by_hop"] == {"0": {"acc": pytest.approx(0.97), "baseline": 0.25},
                                                 "1": {"acc": pytest.approx(0.35), "baseline": 0.26}}
    assert rows[("pure", "gla")]["by_hop"] is None  # stored no split (MQAR, older studies)
    table = calibrate.format_table(v).splitlines()
    head = table.index("test accuracy by hops of the query (h hops: h + 1 lookups; mean over seeds, [no-recall baseline]):")
    assert table[head + 1].split() == ["layout", "h=0", "h=1"]
    gla = [line for line in table[head + 2:] if line.split()[0] == rows[("hybrid", "gla")]["layout"]]
    assert gla and gla[0].split()[1:] == ["0.970", "[0.250]", "0.350", "[0.260]"]
    assert "by hops" not in calibrate.format_table(verdict(space_from_dict(raw_space()), runs_of(GOOD)))


def test_verdict_names_a_control_that_did_not_learn_and_by_how_much():
    v = verdict(space_from_dict(raw_space()), runs_of({**GOOD, "control:transformer": (0.23, 0.95)}))
    assert not v["valid"] and v["kinds"] == ["control"]
    assert "the all-attention control AAAAAA reached 0.230 raw recall at the training length (seeds 0.230, 0.950), 0.670 " \
           "short of calibration.control_min=0.9" in v["failures"][0]


def test_verdict_needs_separation_beyond_twice_the_seed_spread():
    # gla pure and hybrid both at the baseline, within noise of each other and of it
    bad = {**GOOD, "pure:gla": (0.26, 0.30), "hybrid:gla": (0.27, 0.29)}
    v = verdict(space_from_dict(raw_space()), runs_of(bad))
    assert not v["valid"] and v["kinds"] == ["separation"] and len(v["failures"]) == 2
    assert "gla pure (GGGGGG) scored 0.280" in v["failures"][0] and "neither is more than twice the seed spread" in v["failures"][0]
    # equal at the ceiling: far from the baseline, so separated even though pure ties its hybrid
    tie = {**GOOD, "pure:gla": (0.99, 0.99), "hybrid:gla": (0.99, 0.99)}
    v = verdict(space_from_dict(raw_space()), runs_of(tie))
    assert v["valid"] and not {r["mixer"]: r for r in v["rows"] if r["role"] == "pure"}["gla"]["pure_below"]


def test_a_row_near_its_baseline_is_open_until_its_partner_has_every_seed():
    """Pure RetNet at 0.033 / 0.033 against a 0.016 baseline (H200, 2026-12-04) is not apart from the baseline by
    twice the floor spread, but its hybrid may still separate it: 'open', not 'FAIL', while the hybrid lacks a seed."""
    base = {k: v for k, v in GOOD.items() if k != "hybrid:gla"}
    near = {**base, "pure:gla": (0.26, 0.26)}  # the baseline of these fake runs is 0.25
    rows = lambda vals: {(r["role"], r["mixer"]): r["verdict"] for r in verdict(space_from_dict(raw_space()),
                                                                               runs_of(vals))["rows"]}
    assert rows(near)[("pure", "gla")] == "open"
    assert rows({**near, "hybrid:gla": (0.27,)})[("pure", "gla")] == "open"  # its seed 1 may still be far
    assert rows({**near, "hybrid:gla": (0.98, 0.99)})[("pure", "gla")] == "pass"  # apart from its hybrid
    assert rows({**near, "hybrid:gla": (0.26, 0.27)})[("pure", "gla")] == "FAIL"


def test_pure_below_its_hybrid_only_beyond_the_spread_and_in_every_seed():
    # 0.051 vs 0.053 (a space starved to 1 step): inside the spread, so "no", though the mean is lower
    starved = {**GOOD, "pure:hgrn": (0.051, 0.053), "hybrid:hgrn": (0.053, 0.055)}
    v = verdict(space_from_dict(raw_space()), runs_of(starved))
    assert v["mixers"]["hgrn"]["pure_below"] is False and v["mixers"]["gla"]["pure_below"] is True
    assert "hgrn no (+0.002)" in calibrate.format_table(v) and v["pure_below_mixers"] == 1
    # a clear gap in the mean, but seed 1's pure model is above seed 1's hybrid: not below "in every seed"
    crossed = {**GOOD, "pure:gla": (0.10, 0.70), "hybrid:gla": (0.98, 0.60)}
    assert verdict(space_from_dict(raw_space()), runs_of(crossed))["mixers"]["gla"]["pure_below"] is False


def test_pure_below_can_be_required():
    s = space_from_dict(raw_space(calibration={"pure_below_min_mixers": 2}))
    tie = {**GOOD, "pure:gla": (0.99, 0.99), "hybrid:gla": (0.99, 0.99)}  # valid before, but only 1 mixer below
    v = verdict(s, runs_of(tie))
    assert not v["valid"] and v["kinds"] == ["pure_below"]
    assert "for 1 mixer(s) (hgrn); calibration.pure_below_min_mixers=2" in v["failures"][0]
    assert verdict(s, runs_of(GOOD))["valid"]


def ladder_runs(aucs: dict) -> dict:
    """Summaries of a space with graded_ratios ['6:1'] whose recall_auc is aucs[group] per seed."""
    s = space_from_dict(raw_space(calibration={"graded_ratios": ["6:1"]}))
    layouts = {r.key.rsplit(":", 1)[0]: r.layout for r in plan(s)}
    out = {}
    for group, vals in {**GOOD, "ladder6to1:gla": (0.9, 0.9), "ladder6to1:hgrn": (0.9, 0.9)}.items():
        for seed, v in enumerate(vals):
            key = f"{group}:s{seed}"
            out[key] = {**summary(key, layouts[group], v), "recall_auc": aucs.get(group, (0.5, 0.5))[seed]}
    return out


def test_plan_adds_the_graded_ladder_and_its_seed_0_runs_become_trials():
    s = space_from_dict(raw_space(calibration={"graded_ratios": ["6:1", "3:1"]}))  # 3:1 is the hybrid: not twice
    runs = plan(s)
    assert len(runs) == 14
    by_key = {r.key: r for r in runs}
    assert by_key["ladder6to1:gla:s0"].layout == "GGGGGA" and by_key["ladder6to1:gla:s0"].ratio == "6:1"
    assert by_key["ladder6to1:gla:s0"].params == {"mixer": "gla", "ratio": "6:1", "placement": "paper"}
    assert by_key["ladder6to1:hgrn:s1"].params is None
    with pytest.raises(SpaceError, match=r"calibration.graded_ratios: 'x' is not allowed; allowed: ratios r:1"):
        space_from_dict(raw_space(calibration={"graded_ratios": ["x"]}))
    with pytest.raises(ConfigError, match=r"calibration.graded_ratios: '4:1' needs a depth that is a multiple of 4"):
        plan(space_from_dict(raw_space(calibration={"graded_ratios": ["4:1"]})))


def test_graded_check_rises_flat_and_falls_per_mixer():
    s = space_from_dict(raw_space(calibration={"graded_ratios": ["6:1"], "graded_min_mixers": 1}))
    rises = {"pure:gla": (0.00, 0.02), "ladder6to1:gla": (0.40, 0.44), "hybrid:gla": (0.60, 0.62),
             "pure:hgrn": (0.80, 0.80), "ladder6to1:hgrn": (0.81, 0.80), "hybrid:hgrn": (0.80, 0.81)}
    v = verdict(s, ladder_runs(rises))
    assert v["valid"] and v["mixers"]["gla"]["graded"] == "rises" and v["mixers"]["hgrn"]["graded"] == "flat"
    assert [p["ratio"] for p in v["mixers"]["gla"]["ladder"]] == ["pure", "6:1", "3:1"]
    table = calibrate.format_table(v)
    assert "graded measure vs attention share (1 rise, need 1; mean ± half the seed spread per ratio):" in table and "gla: rises (pure 0.010" in table
    assert "hgrn: flat" in table
    # a fall beyond twice the spread on the way up: not graded, though the ends rise
    falls = {**rises, "ladder6to1:gla": (0.90, 0.92)}
    v = verdict(s, ladder_runs(falls))
    assert v["mixers"]["gla"]["graded"] == "falls" and v["mixers"]["gla"]["falls"][0]["from"] == "6:1"
    assert not v["valid"] and v["kinds"] == ["graded"] and "for 0 mixer(s) (none); calibration.graded_min_mixers=1" in v["failures"][0]
    # a fall inside the spread is no fall
    noisy = {**rises, "ladder6to1:gla": (0.55, 0.75)}
    assert verdict(s, ladder_runs(noisy))["mixers"]["gla"]["graded"] == "rises"


def test_a_graded_check_that_failed_for_good_makes_the_calibration_hopeless():
    """graded_min_mixers=2 of 2: once GLA's whole ladder is in and falls (6:1 learns sooner than 3:1, as MQAR did on
    the H200), the verdict cannot be valid whatever HGRN's runs score; while a seed of GLA's ladder is missing it can.
    A verdict stopped for it names the check."""
    from hlnas.calibrate import hopeless

    s = space_from_dict(raw_space(calibration={"graded_ratios": ["6:1"], "graded_min_mixers": 2}))
    falls = {"pure:gla": (0.00, 0.02), "ladder6to1:gla": (0.90, 0.92), "hybrid:gla": (0.60, 0.62)}
    runs = {k: v for k, v in ladder_runs(falls).items() if ":hgrn:" not in k}
    why = hopeless(s, runs)
    assert why == ("the graded measure can rise with the attention share for at most 1 mixer(s) (hgrn), where "
                   "calibration.graded_min_mixers=2: gla falls (6:1 -> 3:1 by 0.300)")
    assert hopeless(s, {k: v for k, v in runs.items() if k != "ladder6to1:gla:s1"}) is None
    v = verdict(s, runs, stopped=why)
    assert not v["valid"] and "graded" in v["kinds"] and why in v["failures"]
    assert calibrate.progress(s, runs)["graded_open"] == ["hgrn"]
    flat = {"pure:gla": (0.50, 0.50), "ladder6to1:gla": (0.50, 0.51), "hybrid:gla": (0.51, 0.50)}
    assert "gla flat" in hopeless(s, {k: v for k, v in ladder_runs(flat).items() if ":hgrn:" not in k})
    assert hopeless(s, {k: v for k, v in ladder_runs({**falls, **{"pure:gla": (0.0, 0.0)}}).items()
                        if ":hgrn:" not in k and "ladder" not in k}) is None


def test_graded_value_prefers_the_learning_auc():
    assert calibrate.graded_value({"recall_auc": 0.3, "recall": 0.9}) == 0.3
    assert calibrate.graded_value({"recall": 0.9}) == 0.9 and calibrate.graded_value({}) is None


def test_verdict_spread_floor_keeps_equal_seeds_from_separating_by_zero():
    s = space_from_dict(raw_space(calibration={"spread_floor": 0.05}))
    near = {**GOOD, "pure:gla": (0.32, 0.32), "hybrid:gla": (0.33, 0.33)}  # 0.07 above a 0.25 baseline: < 2 x 0.05
    assert not verdict(s, runs_of(near))["valid"]


def test_verdict_counts_failed_runs_as_missing_seeds():
    runs = runs_of(GOOD)
    runs["hybrid:hgrn:s1"] = summary("hybrid:hgrn:s1", "HHAHHA", 0.0, status="failed")
    v = verdict(space_from_dict(raw_space()), runs)
    assert not v["valid"] and "hgrn hybrid has 1 of 2 seeds scored (failed: hybrid:hgrn:s1)" in v["failures"][0]


def test_verdict_names_seeds_never_trained_apart_from_failed_runs():
    runs = runs_of(GOOD)
    del runs["hybrid:hgrn:s1"]
    runs["pure:gla:s1"] = summary("pure:gla:s1", "GGGGGG", 0.0, status="failed")
    del runs["pure:gla:s0"]
    failures = verdict(space_from_dict(raw_space()), runs)["failures"]
    assert any("hgrn hybrid has 1 of 2 seeds scored (never trained: seed 1)" in f for f in failures), failures
    assert any("gla pure has 0 of 2 seeds scored (failed: pure:gla:s1; never trained: seed 0)" in f
               for f in failures), failures


# -- the search's calibration step, with fake trials ----------------------------------------------------------------
def test_search_calibrates_first_and_reuses_seed_0_runs_as_trials(monkeypatch, tmp_path):
    run, calls = fake_trial({})
    monkeypatch.setattr(executors, "run_trial", run)
    url = f"sqlite:///{tmp_path}/c.db"
    events = []
    study = run_search(space_from_dict(raw_space()), storage=url, study_name="c", n_trials=7,
                       on_event=lambda k, d: events.append(k))
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
    run_search(None, storage=url, study_name="c", n_trials=7, resume=True, on_event=lambda k, d: events.append((k, d)))
    assert calls == [] and any(e[0] == "calibration" and e[1].get("reused") for e in events if isinstance(e, tuple))


def test_invalid_protocol_refuses_to_search_and_keeps_the_controls(monkeypatch, tmp_path):
    run, calls = fake_trial({("AAAAAA", 0): 0.3, ("AAAAAA", 1): 0.31})
    monkeypatch.setattr(executors, "run_trial", run)
    url = f"sqlite:///{tmp_path}/c.db"
    with pytest.raises(CalibrationFailed) as e:
        run_search(space_from_dict(raw_space()), storage=url, study_name="c", n_trials=7)
    msg = str(e.value)
    assert "the all-attention control AAAAAA reached 0.300 raw recall at the training length" in msg
    assert "0.600 short of calibration.control_min=0.9" in msg and "score.mqar.steps" in msg and "--skip-calibration" in msg
    assert not any(c[0] >= 0 for c in calls)  # no search trial
    study = optuna.load_study(study_name="c", storage=url)
    assert study.user_attrs["hlnas_calibration"]["status"] == "invalid"
    # one run at a time: the control's seed 0 failed first, and no other run started (its trial is kept)
    assert len(study.get_trials(states=(TrialState.COMPLETE,))) == 1 and len(calls) == 1
    # --skip-calibration searches anyway on a new study
    s = run_search(space_from_dict(raw_space()), storage=url, study_name="d", n_trials=2, skip_calibration=True)
    assert s.user_attrs["hlnas_calibration"] == {"status": "skipped"}


def test_an_interrupted_calibration_resumes_with_the_missing_runs(monkeypatch, tmp_path):
    url, calls = interrupted_calibration(monkeypatch, tmp_path)
    stored = optuna.load_study(study_name="c", storage=url).user_attrs["hlnas_calibration"]
    assert stored["status"] == "running" and len(stored["runs"]) == 3
    calls.clear()
    study = run_search(None, storage=url, study_name="c", n_trials=7, resume=True)
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
    from hlnas.calibrate import hopeless

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
    run_search(space_from_dict(raw_space()), storage=f"sqlite:///{tmp_path}/c.db", study_name="c", n_trials=1,
               skip_calibration=True, time_limit=30, drain=20)
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

    from hlnas.calibrate import pure_below_ruled_out, verdict

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
    from hlnas.calibrate import pure_below_ruled_out

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
    from hlnas.calibrate import pure_below_ruled_out

    cfg = space_from_dict(raw_space()).calibration
    run = {"role": "pure", "mixer": "hgrn", "seed": 1, "status": "ok", "raw_train_length": 0.5}
    hyb = {**run, "role": "hybrid", "raw_train_length": 0.45}
    assert pure_below_ruled_out("hgrn", {"p": run}, cfg) is None  # 0.5 leaves room below 1
    assert pure_below_ruled_out("hgrn", {"p": run, "h": hyb}, cfg) == \
        "hgrn pure scored 0.500 on seed 1, not below its 3:1 hybrid's 0.450"
    assert pure_below_ruled_out("hgrn", {"p": run, "h": {**hyb, "status": "failed"}}, cfg) is None  # may run again


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
    run_search(space_from_dict(raw_space()), storage=url, study_name="grid", n_trials=7)
    calls.clear()

    seed1 = space_from_dict(raw_space()).with_sets(["train.seed=1"])
    events = []
    s1 = run_search(seed1, storage=url, study_name="grid_s1", n_trials=3, calibrated_by="grid",
                    on_event=lambda k, d: events.append((k, d)))
    assert not any(c[0] < 0 for c in calls) and len(calls) == 3  # three search trials, no control run
    assert all(c[2] == 1 for c in calls)  # on seed 1
    cal = s1.user_attrs["hlnas_calibration"]
    grid_cal = optuna.load_study(study_name="grid", storage=url).user_attrs["hlnas_calibration"]
    assert cal == {"status": "valid", "verdict": grid_cal["verdict"], "borrowed_from": {"study": "grid"}}
    assert any(k == "calibration" and d.get("borrowed_from") == "grid" for k, d in events)
    calls.clear()  # a resume keeps the borrowed verdict without the option
    run_search(None, storage=url, study_name="grid_s1", n_trials=4, resume=True)
    assert len(calls) == 1 and not any(c[0] < 0 for c in calls)

    place = space_from_dict(raw_space(mixers=["hgrn"], placements=["front"], sampler="random"))
    assert run_search(place, storage=url, study_name="place", n_trials=1, calibrated_by="grid") \
        .user_attrs["hlnas_calibration"]["borrowed_from"] == {"study": "grid"}

    calls.clear()
    refusals = [
        (raw_space(), "nowhere", "Available: grid, grid_s1, place, place_skip"),
        (raw_space(name="x"), "place_skip", "calibration is skipped, not valid"),
        (raw_space(scale={**raw_space()["scale"], "score": {"objectives": ["val_loss", "mqar"], "mqar": {"steps": 7}}}),
         "grid", "its recall protocol differs from this space's, so its controls do not vouch for it: scale.score.mqar.steps"),
        (raw_space(mixers=["gla", "deltanet"]), "grid", "it did not calibrate mixer(s) deltanet (it has gla, hgrn)"),
    ]
    run_search(space_from_dict(raw_space()), storage=url, study_name="place_skip", n_trials=1, skip_calibration=True)
    calls.clear()
    for i, (raw, source, want) in enumerate(refusals):
        with pytest.raises(HlnasError, match=re.escape(want)):
            run_search(space_from_dict(raw), storage=url, study_name=f"r{i}", n_trials=1, calibrated_by=source)
    with pytest.raises(HlnasError, match="has a calibration of its own"):
        run_search(None, storage=url, study_name="grid", n_trials=7, resume=True, calibrated_by="grid_s1")
    with pytest.raises(ConfigError, match="--calibrated-by takes a study name and excludes --calibrate"):
        run_search(space_from_dict(raw_space()), storage=url, study_name="z", n_trials=1, calibrated_by="grid",
                   skip_calibration=True)
    assert calls == [] and not any(f"r{i}" in n for n in study_names_of(url) for i in range(4))  # nothing created
    assert main(["search", "--storage", url, "--study", "grid_s1", "--resume", "--no-progress", "--workers", "1",
                 "--trials", "4"]) == 0
    assert "unvalidated" not in capsys.readouterr().out


def test_status_of_a_running_calibration_shows_its_rows_so_far_and_whether_it_can_still_pass(tmp_path):
    """hlnas status on a calibration split over several GPU calls: how many runs of the plan are stored, the rows so
    far (no 'valid' line), which mixers can still have their pure model below the hybrid, and a certain failure."""
    from hlnas.console import status_text
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
    from hlnas.calibrate import advice, verdict
    from hlnas.console import status_text
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
    from hlnas.calibrate import hopeless

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
