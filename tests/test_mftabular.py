"""The multi-fidelity tabular benchmark (hlnas.mftabular): stored curves replayed through the search loop on a
simulated clock, full fidelity against the rung scheduler."""

from __future__ import annotations

import pytest

from hlnas.errors import ConfigError
from hlnas.mftabular import CurveBenchmark, SimulatedExecutor, curve_value, hv_at, run_multi_fidelity
from hlnas.space import load_space
from hlnas.trial import layout_metrics


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
    from hlnas.proposals import trial_spec
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
