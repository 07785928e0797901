"""The search (``hlnas search``) and the sampler benchmark (``hlnas bench-samplers``) run one proposal loop:
for the same space, sampler and seed they propose, dedupe, fall back and skip infeasible layouts alike."""

from __future__ import annotations

import argparse

import pytest

from hlnas import space as space_mod
from hlnas.search import samplers
from hlnas.cli.main import build_parser
from hlnas.search.records import MAX_REPEATS, REPEATS_BEFORE_FALLBACK
from hlnas.search.study import run_search
from hlnas.search.options import SearchOptions
from hlnas.analysis.tabular import LookupExecutor, TabularBenchmark, run_sampler
from hlnas.model.cost import layout_metrics
from tests.searches import sampler_space as search_space

def fixed_table(sp) -> TabularBenchmark:
    """Fixed metrics for every candidate: recall grows with attention layers and with the mixer's index."""
    model = sp.model
    rows = []
    for i, p in enumerate(sp.grid()):
        lay = str(sp.layout(p))
        cost = layout_metrics(lay, model, sp.kv_context)
        rows.append({"layout": lay, "recall": 0.1 + 0.1 * len(cost["attention_layers"]) + 0.003 * i,
                     "kv_cache_bytes": cost["kv_cache_bytes"]})
    return TabularBenchmark.from_rows(rows, space=sp)


# gp fits a Gaussian process per proposal: a shorter run keeps it quick
@pytest.mark.parametrize("sampler,n", [("nsga2", None), ("tpe", None), ("random", None), ("grid", None), ("gp", 8)])
def test_the_search_and_the_benchmark_propose_the_same_layouts(sampler, n, tmp_path):
    sp = search_space(sampler)  # the sampler tests' space: 41 layouts, the Transformer infeasible
    bench = fixed_table(sp)
    feasible = bench.n_candidates - 1
    events = []  # a journal file: the quickest stored study (the storage is not what this compares)
    study = run_search(sp, SearchOptions(
        storage=f"journal:///{tmp_path}/s.log", study_name="s", n_trials=n or bench.n_candidates, sampler=sampler,
        seed=1, executor=LookupExecutor(bench), on_event=lambda k, d: events.append((k, d))))
    r = run_sampler(bench, sampler, n_evals=n, seed=1)

    trained = [d["layout"] for k, d in events if k == "started"]
    assert len(trained) == len(set(trained)) == (n or feasible)
    assert tuple(trained) == r.layouts  # the same layouts, in the same order
    asked = [t for t in study.get_trials(deepcopy=False) if t.state.name != "WAITING"]
    assert len(asked) == r.asked  # repeats and infeasible proposals alike
    infeasible = [d for k, d in events if k == "infeasible" and "from" not in d]
    assert len(infeasible) == r.infeasible
    if n is None:  # run to the end: the Transformer was proposed, and skipped by both for its KV cache
        assert r.exhausted and [d["layout"] for d in infeasible] == [str(sp.layout({"mixer": "transformer"}))]


def test_one_sampler_table_and_one_set_of_repeat_limits():
    assert space_mod.SAMPLERS is samplers.SAMPLERS == ("nsga2", "tpe", "gp", "random", "grid")
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    search = sub.choices["search"]
    assert next(a for a in search._actions if a.dest == "sampler").choices == samplers.SAMPLERS
    assert (REPEATS_BEFORE_FALLBACK, MAX_REPEATS) == (10, 200)
