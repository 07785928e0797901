"""Pareto fronts, dominance, ties, infeasible and failed trials, hypervolume (on tests/studies.py's made-up studies)."""

from __future__ import annotations

import random

import optuna
import pytest

from hlnas.model.layout import build_layout
from hlnas.space import load_space
from hlnas.analysis.pareto import (
    StudyData, TrialRecord, dominates, front, hypervolume, hypervolume_history, pareto_info, records, study_data,
)  # fmt: skip
from tests.studies import make_study

optuna.logging.set_verbosity(optuna.logging.WARNING)


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


def test_paper_grid_is_read_from_the_stored_space_and_the_attr_only_without_one():
    def data(**attrs):
        return StudyData("s", ("maximize",), ("recall",), (), attrs)

    # created before the content rule: the H200 grid's attr said False (its name is not 'paper_grid')
    assert data(hlnas_paper_grid=False, hlnas_space=load_space("paper_grid_h200_lr").to_dict()).paper_grid
    # a stored placement space is not a paper grid, whatever its attr says
    assert not data(hlnas_paper_grid=True, hlnas_space=load_space("placement").to_dict()).paper_grid
    # no stored space, or one that no longer parses: the stored attr answers
    assert data(hlnas_paper_grid=True).paper_grid and not data(hlnas_paper_grid=False).paper_grid and not data().paper_grid
    stale = {**load_space("paper_grid").to_dict(), "retired_key": 1}
    assert data(hlnas_paper_grid=True, hlnas_space=stale).paper_grid
    assert not data(hlnas_paper_grid=False, hlnas_space=stale).paper_grid
    assert not data(hlnas_paper_grid=False, hlnas_space="not a mapping").paper_grid
    old_style = make_study(failed=False, infeasible=False)  # read through optuna, as the dashboard does
    old_style.set_user_attr("hlnas_paper_grid", False)
    assert study_data(old_style).paper_grid


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
