"""Calibration: the plan and the verdict's rules (the search's calibration step, with fake trials, is
tests/test_calibration_search.py; the real protocol on CPU is tests/test_cli_search.py::test_plain_hlnas_search_is_the_main_job)."""

from __future__ import annotations

import pytest

from hlnas.calibration import protocol as calibrate
from hlnas.calibration.protocol import plan, verdict
from hlnas.errors import ConfigError
from hlnas.space import SpaceError, space_from_dict
from tests.searches import raw_space


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
    from hlnas.calibration.protocol import hopeless

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


def test_a_stored_calibration_run_keeps_the_card_it_trained_on():
    run = plan(space_from_dict(raw_space()))[0]
    kept = calibrate.run_summary(run, "ok", {"recall": 0.9, "recall_raw": 0.925, "mqar_s": 12.0,
                                             "device_name": "NVIDIA H100 80GB HBM3", "mqar": {"runs": []}})
    assert kept["device_name"] == "NVIDIA H100 80GB HBM3" and kept["mqar_s"] == 12.0 and "mqar" not in kept


def test_extra_ratios_are_trained_and_reported_never_judged():
    """calibration.extra_ratios: each mixer's further ratios (paper placement) join the plan, their seed-0 runs
    become trials; their rows say 'reported' whatever they score, a missing one fails nothing, and they are not on
    the graded ladder. A ratio already trained (the hybrid's, a graded one) is not planned twice."""
    s = space_from_dict(raw_space(calibration={"extra_ratios": ["6:1", "3:1"]}))
    runs = plan(s)
    assert len(runs) == 14
    by_key = {r.key: r for r in runs}
    assert by_key["extra6to1:gla:s0"].layout == "GGGGGA" and by_key["extra6to1:gla:s0"].role == "extra"
    assert by_key["extra6to1:gla:s0"].params == {"mixer": "gla", "ratio": "6:1", "placement": "paper"}
    assert by_key["extra6to1:hgrn:s1"].params is None
    both = space_from_dict(raw_space(calibration={"graded_ratios": ["6:1"], "extra_ratios": ["6:1"]}))
    assert len(plan(both)) == 14 and not any(r.role == "extra" for r in plan(both))
    layouts = {r.key.rsplit(":", 1)[0]: r.layout for r in runs}
    stored = runs_of(GOOD)
    stored.update({f"extra6to1:gla:s{i}": summary(f"extra6to1:gla:s{i}", layouts["extra6to1:gla"], 0.0) for i in (0, 1)})
    stored["extra6to1:hgrn:s0"] = summary("extra6to1:hgrn:s0", layouts["extra6to1:hgrn"], 0.0, status="failed")
    v = verdict(s, stored)
    assert v["valid"] and not v["failures"]
    rows = {(r["role"], r["mixer"]): r for r in v["rows"]}
    assert rows[("extra", "gla")]["verdict"] == "reported" and rows[("extra", "gla")]["recall"] == [0.0, 0.0]
    assert rows[("extra", "hgrn")]["verdict"] == "missing"
    assert "extra" in calibrate.format_table(v) and "gla 6:1" not in " ".join(v["failures"])
    with pytest.raises(SpaceError, match=r"calibration.extra_ratios: 'x' is not allowed; allowed: ratios r:1"):
        space_from_dict(raw_space(calibration={"extra_ratios": ["x"]}))
    with pytest.raises(ConfigError, match=r"calibration.extra_ratios: '4:1' needs a depth that is a multiple of 4"):
        plan(space_from_dict(raw_space(calibration={"extra_ratios": ["4:1"]})))
