"""The multi-fidelity tabular benchmark (hlnas.analysis.mftabular): stored curves replayed through the search loop on a
simulated clock, full fidelity against the rung scheduler."""

from __future__ import annotations

import pytest

from hlnas.errors import ConfigError
from hlnas.analysis.mftabular import CurveBenchmark, SimulatedExecutor, auc_at, curve_value, hv_at, run_multi_fidelity
from hlnas.space import load_space
from hlnas.model.cost import layout_metrics


def bench():
    sp = load_space("tiny").with_sets(["score.mqar.steps=900", "score.mqar.eval_every=100"])
    rows = {}
    for p in sp.grid():
        lay = str(sp.layout(p))
        n = lay.count("A")
        take_off = 900 if n == 0 else 700 - 100 * n  # pure layouts never learn
        rows[lay] = {"curve": [[s, 0.0 if s < take_off or n == 0 else min(1.0, 0.5 + 0.1 * n)] for s in range(100, 901, 100)],
                     "s_per_step": 1.0, "lm_s": 0.0, "kv_cache_bytes": layout_metrics(lay, sp.model, 4096)["kv_cache_bytes"]}
    return CurveBenchmark("t", sp, rows)


def test_a_curve_table_needs_every_candidate_to_the_budget():
    b = bench()
    with pytest.raises(ConfigError, match="without a curve"):
        CurveBenchmark("t", b.space, {k: v for k, v in list(b.rows.items())[1:]})
    short = {k: {**v, "curve": v["curve"][:3]} for k, v in b.rows.items()}
    with pytest.raises(ConfigError, match="ends before"):
        CurveBenchmark("t", b.space, short)
    assert curve_value([[100, 0.2], [200, 0.5]], 150) == 0.2 and curve_value([[100, 0.2]], 50) == 0.0


def test_the_simulated_clock_charges_only_the_steps_a_paused_run_adds():
    from hlnas.search.records import trial_spec
    import dataclasses

    b = bench()
    ex = SimulatedExecutor(b, workers=2)
    p = b.space.grid()[0]
    spec = trial_spec(b.space, 0, p)
    ex.submit(dataclasses.replace(spec, rung_steps=300, state_dir="x"))
    (r,) = ex.wait()
    assert ex.clock == 300 and r.metrics["rung_steps"] == 300
    ex.submit(dataclasses.replace(spec, rung_steps=None, state_dir="x"))  # continued: 600 more steps
    ex.wait()
    assert ex.clock == 900 and ex.busy_s == 900


def test_the_rung_scheduler_spends_fewer_gpu_seconds_for_the_same_front():
    b = bench()
    full = run_multi_fidelity(b, "random", seed=0, workers=2)
    rungs = run_multi_fidelity(b, "random", rungs={"min_steps": 100, "eta": 3}, seed=0, workers=2)
    assert full.complete == b.final().n_candidates and full.stopped == 0
    assert rungs.stopped > 0 and rungs.complete + rungs.stopped == full.complete
    assert rungs.gpu_s < full.gpu_s
    assert full.points[-1][1] == pytest.approx(1.0)
    assert hv_at(rungs, rungs.gpu_s) == pytest.approx(rungs.points[-1][1]) and hv_at(rungs, 0) == 0.0


# -- replaying a stored study (hlnas bench-samplers --study) -----------------------------------------------------


def timed_run(spec):
    """A stand-in for run_trial that stores what a real trial stores: the recall run's curve (raw validation
    accuracy per check, stopped at the 0.98 target), its steps and seconds, mqar_s, and the trial's wall_s."""
    from hlnas.recall.proxy import learning_auc
    from hlnas.search.trial import TrialResult

    lay, top = spec.layout, spec.recipe.score.mqar.steps
    n = lay.count("A")
    if lay == "NNNNNN":
        return TrialResult(spec.number, "failed", {"status": "failed", "error_kind": "nan", "error": "nan"}, "nan", "nan", 1.0)
    take_off = None if n == 0 else 900 - 200 * n
    curve = []
    for s in range(100, top + 1, 100):
        acc = 0.25 if take_off is None or s < take_off else 0.99
        curve.append([s, acc, 1.0])
        if acc >= 0.98:
            break
    steps, sps = curve[-1][0], 0.01 * (1 + n)
    m = {**layout_metrics(lay, spec.recipe.model, spec.kv_context, spec.placement), "status": "ok",
         "recall": 0.0 if take_off is None else 0.95, "mqar_lr": 1e-3, "mqar_val_baseline": 0.25, "mqar_s": steps * sps,
         "recall_auc": learning_auc(curve, top, 0.25, take_off is not None), "mqar_steps_to_target": take_off,
         "mqar": {"runs": [{"lr": 1e-3, "curve": curve, "steps": steps, "wall_s": steps * sps, "finished": True}]},
         "val_loss": 3.0 - 0.1 * n}
    return TrialResult(spec.number, "ok", m, wall_s=steps * sps + 2.0)


def stored_study(tmp_path, space=None):
    from hlnas.search.executors import InlineExecutor
    from hlnas.search.study import run_search
    from hlnas.search.options import SearchOptions

    url = f"sqlite:///{tmp_path}/s.db"
    run_search(space or load_space("tiny"), SearchOptions(
        storage=url, study_name="cpu", n_trials=11, executor=InlineExecutor(timed_run), skip_calibration=True,
        out_root=str(tmp_path / "out")))
    return url


def test_auc_at_is_the_graded_measure_a_run_reports_after_so_many_steps():
    from hlnas.search.rungs import checks
    from hlnas.recall.proxy import learning_auc

    raw = [[100, 0.25, 1.0], [200, 0.5, 1.0], [300, 1.0, 1.0]]  # validation accuracy over a 0.25 baseline
    curve = [[c["step"], c["recall"]] for c in checks({"mqar": {"runs": [{"lr": 1e-3, "curve": raw}]}, "mqar_lr": 1e-3,
                                                                "mqar_val_baseline": 0.25})]
    assert curve == [[100, 0.0], [200, pytest.approx(1 / 3, abs=1e-4)], [300, 1.0]]
    for steps, held in ((200, False), (300, False), (300, True), (600, True), (600, False)):
        assert auc_at(curve, steps, held) == pytest.approx(learning_auc(raw[:steps // 100], steps, 0.25, held), abs=2e-4)
    assert auc_at(curve, 600, True) > auc_at(curve, 600, False)  # stopped at its target: it would stay there


def test_a_study_that_optimizes_recall_auc_is_replayed_on_recall_auc(tmp_path):
    from hlnas.search.rungs import checks
    from hlnas.search.study import load_hlnas_study
    auc_space = load_space("tiny").with_overrides(objectives=[{"name": "recall", "metric": "recall_auc"},
                                                              {"name": "kv_cache", "metric": "kv_cache_bytes"}])
    study = load_hlnas_study(stored_study(tmp_path, auc_space), "cpu")
    b = CurveBenchmark.from_study(study, missing="infeasible")
    assert b.metric == "recall_auc"
    trials = {t.user_attrs["layout"]: t for t in study.trials if t.state.name == "COMPLETE"}
    for lay, row in b.rows.items():  # the top: the trial's stored objective, the value the study's front holds
        assert b.value(row, 1200) == trials[lay].values[0] == trials[lay].user_attrs["recall_auc"]
    hyb = b.rows["HHHHHA"]  # took off at 700, stopped there
    at = {c["step"]: c["recall_auc"] for c in checks(trials["HHHHHA"].user_attrs)}
    assert b.value(hyb, 300) == at[300] == 0.0 and b.value(hyb, 700) == at[700] > 0
    assert at[700] < b.value(hyb, 900) < b.value(hyb, 1200)  # held at its target after it stopped
    assert b.value(hyb, 650) == auc_at([[c, v] for c, v in hyb["curve"] if c <= 600], 650, False)  # not before it
    assert b.final("table").values("HHHHHA")[0] == b.value(hyb, 1200)  # the hypervolume's recall axis
    (tmp_path / "r").mkdir()
    plain = CurveBenchmark.from_study(load_hlnas_study(stored_study(tmp_path / "r"), "cpu"), missing="infeasible")
    assert plain.metric == "recall" and plain.value(plain.rows["HHHHHA"], 1200) == 0.95
    with pytest.raises(ConfigError, match="metric 'val_loss' is not allowed; allowed: recall, recall_auc"):
        CurveBenchmark("t", b.space, b.rows, missing="infeasible", metric="val_loss")


def test_a_stored_study_replays_its_curves_at_the_seconds_they_took(tmp_path):
    from hlnas.search.study import load_hlnas_study

    url = stored_study(tmp_path)
    study = load_hlnas_study(url, "cpu")
    with pytest.raises(ConfigError, match=r"1 of its space's 11 candidates .*NNNNNN.*--missing infeasible"):
        CurveBenchmark.from_study(study)  # the failed layout has no curve
    b = CurveBenchmark.from_study(study, missing="infeasible")
    assert len(b.rows) == 10 and "NNNNNN" not in b.rows
    hyb, pure = b.rows["HHHHHA"], b.rows["HHHHHH"]
    # stopped at its target at step 700: held there to the budget, the trial's stored recall at the top
    assert hyb["steps_run"] == 700 and hyb["curve"][-2:] == [[700, 0.9867], [1200, 0.95]]
    assert curve_value(hyb["curve"], 600) == 0.0 and curve_value(hyb["curve"], 900) == 0.9867
    assert pure["steps_run"] == 1200 and curve_value(pure["curve"], 1200) == 0.0
    assert hyb["s_per_step"] * 700 == pytest.approx(0.02 * 700) and hyb["lm_s"] == pytest.approx(2.0)
    whole = sum(r["steps_run"] * r["s_per_step"] + r["lm_s"] for r in b.rows.values())
    full = run_multi_fidelity(b, "random", seed=0, workers=1, scale="table")
    assert full.gpu_s == pytest.approx(whole) and full.complete == 10  # one worker: the stored seconds, summed
    rungs = run_multi_fidelity(b, "random", rungs={"min_steps": 200, "eta": 3}, seed=0, workers=1, scale="table")
    assert rungs.stopped > 0 and rungs.complete + rungs.stopped == 10 and rungs.gpu_s < full.gpu_s


def test_bench_samplers_study_writes_the_table_and_figure(tmp_path, capsys):
    from hlnas.cli.main import main

    url = stored_study(tmp_path)
    out = tmp_path / "bench"
    rc = main(["bench-samplers", "--study", "cpu", "--storage", url, "--missing", "infeasible", "--seeds", "3",
               "--workers", "2", "--out", str(out)])
    assert rc == 0
    md = (out / "hv_vs_gpu_s.md").read_text()
    for method in ("full random", "full nsga2", "rungs + random", "rungs + nsga2"):
        assert f"| {method} |" in md
    assert "Mean ± std over 3 seeds" in md and "rungs at min_steps 200, eta 3" in md  # 1200 / 3^2 -> the next check
    assert f"hlnas bench-samplers --study cpu --storage {url}" in md
    assert (out / "hv_vs_gpu_s.svg").read_text().startswith("<svg") and "rungs + nsga2" in (out / "hv_vs_gpu_s.csv").read_text()
    assert "| full nsga2 |" in capsys.readouterr().out
    assert main(["bench-samplers", "--study", "cpu", "--storage", url, "--samplers", "nsgaii"]) == 2
    assert "did you mean: nsga2" in capsys.readouterr().err.lower()
    assert main(["bench-samplers", "--paper", "--workers", "8"]) == 2  # replay-only flags are refused elsewhere
    assert "--workers apply to --study" in capsys.readouterr().err
