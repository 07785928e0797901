"""Pareto fronts, dominance, ties, infeasible and failed trials, hypervolume; plus the hlnas-shaped study builder
the dashboard and report tests reuse (studies written with optuna only, as the study loop writes them)."""

from __future__ import annotations

import itertools
import math
import random
import warnings

import optuna
import pytest

from hlnas.catalog import PAPER_MIXERS
from hlnas.layout import PAPER_RATIOS, build_layout
from hlnas.pareto import (
    TrialRecord, dominates, front, hypervolume, hypervolume_history, pareto_info, records, study_data,
)  # fmt: skip

optuna.logging.set_verbosity(optuna.logging.WARNING)

OBJECTIVES = [
    {"name": "recall", "metric": "recall", "direction": "maximize"},
    {"name": "kv_cache_bytes", "metric": "kv_cache_bytes", "direction": "minimize"},
]
KV_PER_ATTN_LAYER = 2 * 4 * 16 * 1024 * 2  # 2 (K,V) x 4 heads x 16 dims x 1024 tokens x bf16
_QUALITY = {"hgrn": 0.05, "retnet": 0.02, "gla": 0.12, "hgrn2": 0.16, "deltanet": 0.2, "gated_deltanet": 0.22}
_GROUPS = ("Multikey", "Multiquery", "Multivalue", "Singlevalue", "CWE+FWE", "QA", "VT")


def trial_attrs(mixer: str, ratio: str | None = "pure", n_layers: int = 24, *, seed: int = 0, ruler: bool = True, **over) -> dict:
    """User attrs of one trial as hlnas's study loop records them, with made-up but plausible metrics."""
    layout = build_layout(mixer, None if mixer == "transformer" else ratio, n_layers)
    share = len(layout.attention_layers) / n_layers
    q = 0.25 if mixer == "transformer" else _QUALITY[mixer]
    rng = random.Random(f"{mixer}{ratio}{seed}")
    recall = round(min(1.0, q + 0.6 * math.sqrt(share) + rng.uniform(-0.02, 0.02)), 4)
    attrs = {
        "layout": str(layout), "mixers": list(layout.mixers), "attention_layers": list(layout.attention_layers),
        "ratio": layout.ratio, "linear_mixers": list(layout.linear_mixers), "placement": None if share in (0, 1) else "paper",
        "params": 1_000_000 + 1000 * len(layout.attention_layers), "kv_cache_bytes": KV_PER_ATTN_LAYER * len(layout.attention_layers),
        "kv_context": 1024, "state_bytes": 4096 * (n_layers - len(layout.attention_layers)), "flops_per_token": 2_000_000,
        "val_loss": round(3.2 - q - 0.2 * share + rng.uniform(-0.01, 0.01), 4), "recall": recall, "mqar_acc": recall,
        "tokens_per_s": 5000.0, "train_wall_s": 12.0, "status": "ok", "error_kind": None, "error": None,
    }  # fmt: skip
    # the recall checks of its fresh recall model (hlnas.rungs.checks' format): learning up to its recall by step 300
    attrs["hlnas_checks"] = [{"step": s, "val_acc": round(0.25 + 0.75 * recall * min(1.0, s / 300), 4),
                              "recall": round(recall * min(1.0, s / 300), 4), "recall_auc": round(recall * min(1.0, s / 300) / 2, 4),
                              "loss": 1.0} for s in (100, 200, 300, 400)]
    if ruler:
        groups = {g: round(min(1.0, recall * (0.6 + 0.1 * i)), 3) for i, g in enumerate(_GROUPS)}
        attrs["ruler"] = {"tasks": {"niah_single_1": groups["Singlevalue"], "vt": groups["VT"]}, "groups": groups, "average": recall}
    attrs.update(over)
    return attrs


def add_trial(study: optuna.Study, attrs: dict, *, state=optuna.trial.TrialState.COMPLETE, constraints=None) -> None:
    values = None
    if state == optuna.trial.TrialState.COMPLETE:
        values = [attrs[o["metric"]] for o in study.user_attrs["hlnas_objectives"]]
    dist = optuna.distributions.CategoricalDistribution(sorted(set(PAPER_MIXERS) | {"transformer"}))
    mixer = attrs["linear_mixers"][0] if attrs["linear_mixers"] else "transformer"
    study.add_trial(optuna.trial.create_trial(state=state, values=values, params={"mixer": mixer}, distributions={"mixer": dist},
                                              user_attrs=attrs, constraints=constraints))  # fmt: skip


def calibration_verdict(mixers) -> dict:
    """A stored calibration verdict of the shape hlnas.calibrate.verdict writes (control, pure and 3:1 per mixer)."""
    rows = [{"role": "control", "mixer": "transformer", "layout": "A" * 24, "recall": [0.97, 0.95], "mean": 0.96,
             "spread": 0.02, "baseline": 0.125, "verdict": "pass"}]
    for i, m in enumerate(mixers):
        rows += [{"role": "pure", "mixer": m, "layout": f"{m} pure", "recall": [0.2 + 0.05 * i, 0.22 + 0.05 * i],
                  "mean": 0.21 + 0.05 * i, "spread": 0.02, "baseline": 0.125, "verdict": "pass"},
                 {"role": "hybrid", "mixer": m, "layout": f"{m} 3:1", "recall": [0.9, 0.92], "mean": 0.91, "spread": 0.02,
                  "baseline": 0.125, "verdict": "pass"}]
    return {"valid": True, "failures": [], "kinds": [], "rows": rows, "config": {"control_min": 0.9, "hybrid_ratio": "3:1"}}


def make_study(storage=None, name: str = "hlnas-test", *, paper_grid: bool = True, mixers=("gla", "deltanet", "hgrn2"),
               ratios=PAPER_RATIOS, transformer: bool = True, failed: bool = True, infeasible: bool = True) -> optuna.Study:
    """An hlnas-shaped 2-objective study (recall max, KV bytes min) with ok, failed and infeasible trials."""
    study = optuna.create_study(storage=storage, study_name=name, directions=[o["direction"] for o in OBJECTIVES])
    with warnings.catch_warnings():  # set_metric_names is "experimental" in optuna 5
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names([o["name"] for o in OBJECTIVES])
    for key, value in {"hlnas_version": "0.1.0", "hlnas_space": {"mixers": list(mixers), "ratios": list(ratios)},
                       "hlnas_space_hash": "abc123", "hlnas_objectives": OBJECTIVES, "hlnas_kv_context": 1024,
                       "hlnas_preset": "proxy-tiny", "hlnas_paper_grid": paper_grid,
                       "hlnas_calibration": {"status": "valid", "verdict": calibration_verdict(mixers)}}.items():  # fmt: skip
        study.set_user_attr(key, value)
    for mixer, ratio in itertools.product(mixers, ratios):
        add_trial(study, trial_attrs(mixer, ratio))
    if transformer:
        add_trial(study, trial_attrs("transformer"))
    if failed:
        attrs = trial_attrs("retnet", "6:1", status="failed", error_kind="oom", error="CUDA out of memory", recall=None, ruler=False)
        add_trial(study, attrs, state=optuna.trial.TrialState.FAIL)
    if infeasible:
        add_trial(study, trial_attrs("gated_deltanet", "3:1", status="infeasible"), constraints={"max_params": 5.0})
    return study


# -- dominance -----------------------------------------------------------------------------


def rec(n, values=None, state="complete", constraints=(), **attrs) -> TrialRecord:
    return TrialRecord(number=n, state=state, values=values, attrs=attrs, constraints=constraints)


def test_dominates_respects_directions_and_ties():
    mm = ("minimize", "minimize")
    assert dominates((1, 1), (2, 2), mm) and not dominates((2, 2), (1, 1), mm)
    assert not dominates((1, 1), (1, 1), mm)  # equal: neither dominates
    assert dominates((1, 1), (1, 2), mm)  # weakly better everywhere, strictly in one
    assert not dominates((1, 3), (2, 2), mm)  # a trade-off
    mx = ("minimize", "maximize")
    assert dominates((1, 0.9), (2, 0.5), mx) and not dominates((1, 0.5), (2, 0.9), mx)


def test_pareto_info_two_metrics_min_max_mix():
    recs = [
        rec(0, kv_cache_bytes=0, recall=0.2),  # cheapest: front
        rec(1, kv_cache_bytes=100, recall=0.5),  # front
        rec(2, kv_cache_bytes=200, recall=0.4),  # dominated by 1
        rec(3, kv_cache_bytes=300, recall=0.7),  # front
        rec(4, kv_cache_bytes=300, recall=0.7),  # tie with 3: both stay
        rec(5, kv_cache_bytes=50, recall=0.2),  # dominated by 0 (same recall, more bytes)
    ]
    info = pareto_info(recs)  # default directions: kv minimize, recall maximize
    assert info.directions == ("minimize", "maximize")
    assert [r.number for r in info.front] == [0, 1, 3, 4]  # sorted by x
    assert sorted(r.number for r in info.dominated) == [2, 5]
    # flipping a direction flips the answer: maximizing bytes makes 3/4 dominate everything
    info2 = pareto_info(recs, ("maximize", "maximize"))
    assert [r.number for r in info2.front] == [3, 4]
    # minimize both: the cheapest lowest-recall trial wins alone
    info3 = pareto_info(recs, ("minimize", "minimize"))
    assert [r.number for r in info3.front] == [0]


def test_infeasible_failed_and_unscored_never_reach_the_front():
    recs = [
        rec(0, kv_cache_bytes=100, recall=0.5),
        rec(1, kv_cache_bytes=0, recall=0.9, constraints=(1.0,)),  # would dominate, but a constraint > 0
        rec(2, kv_cache_bytes=0, recall=0.95, status="infeasible"),  # the study loop's verdict
        rec(3, state="fail", status="failed", error_kind="nan"),
        rec(4, kv_cache_bytes=0, recall=0.99, status="failed"),  # status wins over a COMPLETE state
        rec(5, kv_cache_bytes=10),  # no recall
        rec(6, kv_cache_bytes=10, recall=float("nan")),
        rec(7, state="running", kv_cache_bytes=0, recall=1.0),  # not finished: left out
        rec(8, kv_cache_bytes=200, recall=0.6, constraints=(0.0, -1.0)),  # 0 and below are feasible
    ]
    info = pareto_info(recs)
    assert [r.number for r in info.front] == [0, 8]
    assert [r.number for r in info.infeasible] == [1, 2]
    assert [r.number for r in info.failed] == [3, 4]
    assert [r.number for r in info.unscored] == [5, 6]
    assert not info.dominated
    with pytest.raises(ValueError, match="no default direction for metric 'foo'"):
        pareto_info(recs, None, "foo", "recall")
    with pytest.raises(ValueError, match="allowed: minimize, maximize"):
        pareto_info(recs, ("down", "up"))


def test_reused_copies_are_left_out_of_fronts_and_hypervolume():
    recs = [rec(0, (0.5, 10.0), kv_cache_bytes=10, recall=0.5), rec(1, (0.5, 10.0), kv_cache_bytes=10, recall=0.5, reused_from=0),
            rec(2, (0.2, 0.0), kv_cache_bytes=0, recall=0.2)]
    assert [r.number for r in pareto_info(recs).front] == [2, 0]
    assert [r.number for r in front(recs, ("maximize", "minimize")).front] == [2, 0]
    assert [n for n, _ in hypervolume_history(recs, ("maximize", "minimize"))] == [1, 2]


def test_front_over_all_objectives_of_a_real_study():
    study = make_study()
    data = study_data(study)
    assert data.objective_names == ("recall", "kv_cache_bytes") and data.directions == ("maximize", "minimize")
    assert data.paper_grid and data.kv_context == 1024 and data.is_hlnas
    info = front(data.records, data.directions, data.objective_names)
    optuna_best = {t.number for t in study.best_trials}
    assert {r.number for r in info.front} == optuna_best  # agrees with optuna (it also excludes infeasible trials)
    assert [r.layout for r in info.failed] == [str(build_layout("retnet", "6:1"))]
    assert [r.attrs["ratio"] for r in info.infeasible] == ["3:1"]
    # the 2-D view of the same metrics is the same front
    assert {r.number for r in pareto_info(data.records).front} == optuna_best
    # records accept FrozenTrials directly and keep objective values by name
    r0 = records(study.get_trials(), data.objective_names)[0]
    assert r0.metric("recall") == r0.values[0] and r0.metric("layout") is None


def test_front_on_three_objectives_with_ties():
    recs = [rec(0, (1.0, 1.0, 1.0)), rec(1, (1.0, 1.0, 1.0)), rec(2, (0.0, 2.0, 2.0)), rec(3, (2.0, 2.0, 2.0)), rec(4, None, "fail")]
    info = front(recs, ["minimize"] * 3)
    assert [r.number for r in info.front] == [2, 0, 1] and [r.number for r in info.dominated] == [3]
    assert [r.number for r in info.failed] == [4]
    with pytest.raises(ValueError, match="2 objective names for 3 directions"):
        front(recs, ["minimize"] * 3, ["a", "b"])


# -- hypervolume ---------------------------------------------------------------------------


def test_hypervolume_2d_exact_and_agrees_with_optuna_nd():
    pts = [(1, 3), (2, 2), (3, 1), (3, 3)]
    # staircase under reference (4, 4): 3x1 + 2x1 + 1x1 = 6
    assert hypervolume(pts, (4, 4)) == pytest.approx(6.0)
    assert hypervolume([(5, 0)], (4, 4)) == 0.0  # beyond the reference: nothing
    assert hypervolume([(2,)], (3,)) == 1.0
    # 3-D goes through optuna's WFG; lifting the 2-D set by a unit third axis keeps the volume
    assert hypervolume([(*p, 0.0) for p in pts], (4, 4, 1)) == pytest.approx(6.0)
    rng = random.Random(0)
    cloud = [(rng.random(), rng.random()) for _ in range(30)]
    mc = sum(any(x >= a and y >= b for a, b in cloud) for x, y in ((rng.random(), rng.random()) for _ in range(20000))) / 20000
    assert hypervolume(cloud, (1, 1)) == pytest.approx(mc, abs=0.02)


def test_hypervolume_history_is_monotone_and_normalised():
    recs = [
        rec(0, (0.2, 0.0)),  # recall 0.2 at 0 bytes
        rec(1, None, "fail"),  # failed: not counted as completed
        rec(2, (0.4, 100.0)),
        rec(3, (0.9, 0.0), constraints=(3.0,)),  # infeasible: counted, adds nothing
        rec(4, (0.6, 300.0)),
        rec(5, (0.3, 300.0)),  # dominated: adds nothing
    ]
    hist = hypervolume_history(recs, ("maximize", "minimize"))
    assert [n for n, _ in hist] == [1, 2, 3, 4, 5]
    hv = [h for _, h in hist]
    assert hv == sorted(hv) and hv[1] > hv[0] and hv[2] == hv[1] and hv[4] == hv[3]
    # normalised: recall 0.2..0.6 -> (maximize) 1..0, bytes 0..300 -> 0..1, reference 1.1
    # points (1, 0), (0.5, 1/3), (0, 1): staircase area
    expected = 0.1 * 1.1 + (1.0 - 0.5) * (1.1 - 1 / 3) + 0.5 * (1.1 - 1.0)
    assert hv[-1] == pytest.approx(expected)
    assert hv[-1] <= 1.1**2
    # an explicit reference works in the objectives' own units and directions
    raw = hypervolume_history(recs, ("maximize", "minimize"), reference=(0.0, 400.0))
    assert raw[0][1] == pytest.approx(0.2 * 400)
    assert raw[-1][1] == pytest.approx(0.2 * 400 + 0.2 * 300 + 0.2 * 100)
    with pytest.raises(ValueError, match="reference has 1 values for 2 objectives"):
        hypervolume_history(recs, ("maximize", "minimize"), reference=(0.0,))
    assert hypervolume_history([], ("minimize",)) == []
