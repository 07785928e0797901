"""The tabular benchmark: look-ups instead of training, real optuna studies, hypervolume over evaluations."""

from __future__ import annotations


import optuna
import pytest

from hlnas.analysis import paper
from hlnas.cli.main import main
from hlnas.model.config import preset
from hlnas.errors import ConfigError
from hlnas.model.layout import build_layout
from hlnas.space import load_space
from hlnas.analysis.comparison import compare, load_sampler
from hlnas.analysis.tabular import TabularBenchmark, run_sampler
from hlnas.model.cost import layout_metrics
from tests.helpers import write_csv


@pytest.fixture(scope="module")
def bench() -> TabularBenchmark:
    return TabularBenchmark.from_paper()


# A hand-checkable table: GLA pure / 6:1 / 3:1 and the Transformer (dominated by GLA 6:1).
TINY = [
    {"mixer": "gla", "ratio": "pure", "recall": "0.2", "kv_cache_bytes_4k": "0"},
    {"mixer": "gla", "ratio": "6:1", "recall": "0.5", "kv_cache_bytes_4k": "100"},
    {"mixer": "gla", "ratio": "3:1", "recall": "0.6", "kv_cache_bytes_4k": "200"},
    {"mixer": "transformer", "ratio": "", "recall": "0.4", "kv_cache_bytes_4k": "400"},
]


def test_from_paper_holds_exactly_the_published_cells_with_hlnas_kv_bytes(bench):
    table7 = paper.recall_by_ratio()
    published = {(m, r): v for m, by in table7.items() if m != "average" for r, v in by.items()}
    published[("transformer", "transformer")] = paper.transformer_recall()  # Table 5: 0.423
    got = {(row["mixer"], row["ratio"]): row["recall"] for row in bench.table.values()}
    assert got == published and len(got) == 21
    assert bench.n_candidates == 21 and bench.space.mixers == ("gla", "hgrn2", "deltanet", "gated_deltanet")
    model = preset("paper-1.3b")
    for layout, row in bench.table.items():
        assert row["kv_cache_bytes"] == layout_metrics(layout, model, 4096, "paper")["kv_cache_bytes"]
    # by hand: 2 (K and V) x 2048 wide x 4096 tokens x 2 bytes per attention layer
    per_layer = 2 * 2048 * 4096 * 2
    assert bench.table[str(build_layout("gated_deltanet", "6:1"))]["kv_cache_bytes"] == 4 * per_layer
    assert bench.table[str(build_layout("transformer", None))]["kv_cache_bytes"] == 24 * per_layer
    assert bench.table[str(build_layout("gla", "pure"))]["kv_cache_bytes"] == 0
    # the front read off the published numbers: best recall per ratio, where it beats every smaller cache
    assert bench.front() == [str(build_layout(m, r)) for m, r in
                             (("gated_deltanet", "3:1"), ("hgrn2", "6:1"), ("deltanet", "24:1"), ("gated_deltanet", "pure"))]


def test_tiny_csv_gives_the_hand_computed_hypervolume(tmp_path):
    b = TabularBenchmark.from_csv(write_csv(tmp_path / "t.csv", TINY))
    assert b.objectives == ("recall", "kv_cache_bytes") and b.n_candidates == 4  # kv read from kv_cache_bytes_4k
    # scaled (0 = best): recall (0.6 - r) / 0.4, kv / 400 -> pure (1, 0), 6:1 (.25, .25), 3:1 (0, .5), T (.5, 1)
    # reference (1.1, 1.1): 3:1 1.1 x 0.6 + 6:1 0.85 x 0.25 + pure 0.1 x 0.25; T is dominated
    assert b.max_hypervolume == pytest.approx(0.66 + 0.2125 + 0.025)
    r = run_sampler(b, "grid")
    assert r.layouts == tuple(str(build_layout(*c)) for c in (("gla", "pure"), ("gla", "6:1"), ("gla", "3:1"), ("transformer", None)))
    # pure alone: 0.1 x 1.1; with 6:1: 0.85 x 0.85 + 0.1 x 0.25
    assert r.hv == pytest.approx((0.11 / 0.8975, 0.7475 / 0.8975, 1.0, 1.0))
    # scaled by the front instead (kv / 200; the Transformer lands beyond the reference)
    f = b.with_scale("front")
    assert f.max_hypervolume == pytest.approx(1.1 * 0.1 + 0.85 * 0.5 + 0.1 * 0.5)
    assert run_sampler(f, "grid").hv == pytest.approx((0.11 / 0.585, (0.85 * 0.6 + 0.1 * 0.5) / 0.585, 1.0, 1.0))


def test_a_failed_row_counts_as_an_evaluation_and_adds_nothing(tmp_path):
    rows = [dict(r) for r in TINY]
    rows[1]["recall"] = ""  # GLA 6:1 trained but gave no score
    b = TabularBenchmark.from_csv(write_csv(tmp_path / "t.csv", rows))
    r = run_sampler(b, "grid")
    assert len(r.hv) == 4 and r.hv[1] == r.hv[0] and r.hv[-1] == 1.0


@pytest.mark.parametrize("sampler,n", [("nsga2", None), ("tpe", None), ("random", None), ("grid", None), ("gp", 6)])
def test_hypervolume_curves_are_non_decreasing_over_distinct_evaluations(bench, sampler, n):
    r = run_sampler(bench, sampler, n, seed=3)
    assert len(r.hv) == (n or 21) and len(set(r.layouts)) == len(r.layouts) == len(r.hv)
    assert all(0.0 <= a <= b <= 1.0 + 1e-12 for a, b in zip(r.hv, r.hv[1:]))
    if n is None:  # every candidate evaluated: the whole front is found
        assert r.exhausted and r.hv[-1] == pytest.approx(1.0)


def test_grid_evaluates_every_candidate_once_in_grid_order_whatever_the_seed(bench):
    grid_order = tuple(str(bench.space.layout(p)) for p in bench.space.grid())
    runs = [run_sampler(bench, "grid", seed=s) for s in (0, 7)]
    for r in runs:
        assert r.layouts == grid_order and r.asked == 21 and r.repeats == 0
        assert r.hv[-1] == pytest.approx(1.0)
        # 100% exactly when the last front member of the grid order is evaluated (the Transformer, last, is dominated)
        assert r.evals_to(1.0) == 1 + max(grid_order.index(lay) for lay in bench.front()) == 20
    assert runs[0].hv == runs[1].hv


class Scripted(optuna.samplers.BaseSampler):
    """A user's sampler: proposes the scripted points in order, then repeats the last one forever."""

    def __init__(self, script: list[dict]):
        self.script, self.study = script, None

    def infer_relative_search_space(self, study, trial):
        return {}

    def sample_relative(self, study, trial, search_space):
        return {}

    def sample_independent(self, study, trial, name, distribution):
        self.study = study
        return self.script[min(trial.number, len(self.script) - 1)][name]


def test_a_repeated_layout_is_told_its_values_and_not_counted(bench):
    t = {"mixer": "transformer", "placement": "paper"}
    script = [{**t, "ratio": "pure"}, {**t, "ratio": "24:1"}, {**t, "ratio": "3:1"},  # three params, one layout
              {"mixer": "gla", "ratio": "6:1", "placement": "paper"}]
    sampler = Scripted(script)
    r = run_sampler(bench, sampler, n_evals=2)
    assert r.layouts == (str(build_layout("transformer", None)), str(build_layout("gla", "6:1")))
    assert r.asked == 4 and r.repeats == 2 and len(r.hv) == 2
    trials = sampler.study.get_trials()
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 4
    assert trials[1].values == trials[2].values == trials[0].values


def test_a_sampler_stuck_on_one_point_still_ends_through_the_fallback(bench):
    stuck = Scripted([{"mixer": "gla", "ratio": "pure", "placement": "paper"}])
    r = run_sampler(bench, stuck, n_evals=4, seed=1)
    # after 10 repeats in a row an untried candidate is enqueued (as in hlnas search)
    assert len(set(r.layouts)) == 4 and r.asked == 4 + 10 * 3 and r.repeats == 30
    full = run_sampler(bench, Scripted([{"mixer": "gla", "ratio": "pure", "placement": "paper"}]), seed=1)
    assert full.exhausted and len(full.hv) == 21 and full.hv[-1] == pytest.approx(1.0)


def test_user_samplers_as_instance_class_and_factory(bench):
    result = compare(bench, {"instance": optuna.samplers.RandomSampler(seed=5), "class": optuna.samplers.QMCSampler,
                             "factory": lambda seed: optuna.samplers.TPESampler(seed=seed, n_startup_trials=3)},
                     n_evals=8, seeds=2)
    assert list(result.runs) == ["instance", "class", "factory"]
    for label in result.runs:
        mean, std = result.mean_std(label)
        assert len(mean) == len(std) == 8 and all(a <= b + 1e-12 for a, b in zip(mean, mean[1:]))
    summary = {row["sampler"]: row for row in result.summary()}
    assert set(summary["factory"]["hv_at"]) == {5, 8}
    with pytest.raises(ConfigError, match="unknown sampler 'nsgaii'"):
        run_sampler(bench, "nsgaii")
    with pytest.raises(ConfigError, match="returned int"):
        run_sampler(bench, lambda seed: 3)


def test_compare_pads_and_summarises(bench):
    result = compare(bench, ("random", "grid"), seeds=3)
    rows = result.rows()
    assert len(rows) == 2 * 21 and rows[-1] == {"sampler": "grid", "evals": 21, "hv_mean": pytest.approx(1.0), "hv_std": 0.0}
    grid = next(r for r in result.summary() if r["sampler"] == "grid")
    assert grid["evals_to"][1.0] == (20, 0.0, 3)
    md = result.to_markdown()
    assert md.splitlines()[0].startswith("| sampler | HV@5 |") and "| grid |" in md
    front = result.rescored(bench.with_scale("front"))
    assert front.runs["grid"][0].layouts == result.runs["grid"][0].layouts
    assert front.runs["grid"][0].hv[-1] == pytest.approx(1.0) and front.runs["grid"][0].hv[4] < result.runs["grid"][0].hv[4]


def test_missing_columns_are_named(tmp_path):
    rows = [{k: v for k, v in r.items() if k != "kv_cache_bytes_4k"} for r in TINY]
    with pytest.raises(ConfigError) as e:
        TabularBenchmark.from_csv(write_csv(tmp_path / "a.csv", rows))
    msg = str(e.value)
    assert "missing column(s): kv_cache_bytes or kv_cache_bytes_4k" in msg and "The table has: mixer, ratio, recall" in msg
    rows = [{"recall": r["recall"], "kv_cache_bytes": r["kv_cache_bytes_4k"]} for r in TINY]
    with pytest.raises(ConfigError, match=r"missing column\(s\): layout \(or mixer"):
        TabularBenchmark.from_csv(write_csv(tmp_path / "b.csv", rows))
    with pytest.raises(ConfigError, match="'val_loss'.*missing|missing column.*val_loss"):
        TabularBenchmark.from_csv(write_csv(tmp_path / "c.csv", TINY), objectives=["recall", "kv_cache_bytes", "val_loss"])
    with pytest.raises(ConfigError, match="has no known direction; write it as 'speed:max'"):
        TabularBenchmark.from_csv(write_csv(tmp_path / "d.csv", TINY), objectives=["recall", "speed"])
    bad = [dict(r) for r in TINY]
    bad[2]["recall"] = "high"
    with pytest.raises(ConfigError, match=r"row 4, column 'recall': 'high' is not a number"):
        TabularBenchmark.from_csv(write_csv(tmp_path / "e.csv", bad))


def test_candidates_without_a_row_are_an_error_or_explicitly_infeasible(bench):
    rows = list(bench.table.values())
    with pytest.raises(ConfigError, match="10 of the 31 candidates of space 'paper_grid' have no row: hgrn pure"):
        TabularBenchmark.from_rows(rows, space="paper_grid")
    b = TabularBenchmark.from_rows(rows, space="paper_grid", missing="infeasible")
    assert b.n_candidates == 31 and b.max_hypervolume == pytest.approx(bench.max_hypervolume)
    r = run_sampler(b, "grid")
    assert r.asked == 31 and r.infeasible == 10 and len(r.hv) == 21 and r.hv[-1] == pytest.approx(1.0)
    assert set(r.layouts) == set(bench.table)
    with pytest.raises(ConfigError, match="not candidates of space 'tiny'"):
        TabularBenchmark.from_rows(rows, space="tiny")


def test_a_grid_run_csv_with_three_objectives(tmp_path):
    """The columns a GPU grid run writes (paper_grid: 31 rows); the space is inferred from the rows."""
    space = load_space("paper_grid")
    rows = []
    for i, p in enumerate(space.grid()):
        lay = space.layout(p)
        n_attn = len(lay.attention_layers)
        rows.append({"mixer": p["mixer"], "ratio": lay.ratio, "layout": str(lay),
                     "attention_layers": ";".join(map(str, lay.attention_layers)), "params": 1000,
                     "kv_cache_bytes_4k": 1024 * n_attn, "kv_cache_bytes_32k": 8192 * n_attn, "state_bytes": 10,
                     "val_loss": 3.0 - 0.01 * i, "ruler_avg": 0.1 + 0.01 * n_attn, "ruler_niah_single_1": 0.5,
                     "mqar_acc": 0.5, "recall": 0.1 + 0.01 * n_attn + 0.001 * i, "tokens_per_s": 1e5})
    b = TabularBenchmark.from_csv(write_csv(tmp_path / "grid.csv", rows), objectives=["recall", "kv_cache_bytes", "val_loss"])
    assert b.n_candidates == 31 and b.objectives == ("recall", "kv_cache_bytes", "val_loss")
    assert b.directions == ("maximize", "minimize", "minimize")
    assert {str(space.layout(p)) for p in space.grid()} == set(b.table)
    r = run_sampler(b, "nsga2", n_evals=10)
    assert len(r.hv) == 10 and all(a <= c for a, c in zip(r.hv, r.hv[1:]))
    rows[3]["mixer"] = "gla"  # disagrees with its layout string
    with pytest.raises(ConfigError, match="row 5: column mixer='gla' disagrees with layout"):
        TabularBenchmark.from_csv(write_csv(tmp_path / "bad.csv", rows))


def test_cli_runs_a_users_sampler_file_and_writes_the_plot(tmp_path, capsys):
    mine = tmp_path / "my_sampler.py"
    mine.write_text("import optuna\n\ndef make(seed):\n    return optuna.samplers.RandomSampler(seed=seed + 100)\n")
    assert load_sampler("grid") == "grid" and callable(load_sampler(f"{mine}:make"))
    with pytest.raises(ConfigError, match="has no attribute 'nope'"):
        load_sampler(f"{mine}:nope")
    out = tmp_path / "out"
    table = write_csv(tmp_path / "t.csv", TINY)
    assert main(["bench-samplers", "--table", table, "--samplers", f"grid,{mine}:make", "--seeds", "2", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| grid |" in text and f"| {mine}:make |" in text
    assert {p.name for p in out.iterdir()} == {"hv_vs_evals.html", "hv_vs_evals.csv", "hv_vs_evals_runs.csv"}
    assert "plotly" in (out / "hv_vs_evals.html").read_text()[:5000].lower()


def test_a_full_disk_under_bench_samplers_out_is_one_line_and_leaves_no_partial_file(tmp_path, monkeypatch, capsys):
    import hlnas.outputs as outputs
    from tests.helpers import filling_up

    out = tmp_path / "out"
    monkeypatch.setattr(outputs, "open", filling_up(64), raising=False)  # the plot page is far larger
    assert main(["bench-samplers", "--table", write_csv(tmp_path / "t.csv", TINY), "--samplers", "grid", "--seeds", "1",
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]  # after the benchmark's own progress lines
    assert "Traceback" not in err and last.startswith("hlnas bench-samplers: error: the disk is full: cannot write "
                                                       f"{out / 'hv_vs_evals.html'}")
    assert list(out.iterdir()) == []  # neither a partial page nor its temporary


def _gla_space(**extra):
    from hlnas.space import space_from_dict

    return space_from_dict({"name": "gla3", "mixers": ["gla"], "ratios": ["pure", "6:1", "3:1"], "placements": ["paper"],
                            "transformer": False, "layers": 24, "sampler": "grid", **extra})


def test_max_hypervolume_counts_only_rows_a_search_can_reach(tmp_path):
    # GLA 3:1 is the best row (recall .6) but breaks the space's KV constraint, so the search never evaluates it:
    # the grid evaluates every feasible row and must reach 1.0 (it stopped at 0.957 of the all-rows volume before)
    plain = _gla_space()
    l61, l31 = str(build_layout("gla", "6:1")), str(build_layout("gla", "3:1"))
    kv = {lay: layout_metrics(lay, plain.model, plain.kv_context)["kv_cache_bytes"] for lay in (l61, l31)}
    assert kv[l61] < kv[l31]
    space = _gla_space(constraints={"max_kv_bytes": (kv[l61] + kv[l31]) / 2})
    b = TabularBenchmark.from_csv(write_csv(tmp_path / "t.csv", TINY[:3]), space=space)
    # feasible rows scaled by their own best/worst: pure (1, 0), 6:1 (0, 1); reference 1.1: 1.1 x 0.1 + 0.1 x 1.0
    assert b.max_hypervolume == pytest.approx(0.21)
    assert b.front() == [l61, str(build_layout("gla", "pure"))]
    r = run_sampler(b, "grid")
    assert l31 not in r.layouts and r.infeasible == 1 and r.hv[-1] == pytest.approx(1.0)
    # a row marked failed or infeasible in its status column is no reachable volume either, whatever its numbers
    rows = [dict(row, status="ok") for row in TINY]
    rows[2]["status"] = "infeasible"
    m = TabularBenchmark.from_csv(write_csv(tmp_path / "m.csv", rows))
    assert m.max_hypervolume == pytest.approx(1.1 * 0.85 + 0.1 * 0.25) and m.values(l31) is None
    rm = run_sampler(m, "grid")
    assert l31 not in rm.layouts and rm.infeasible == 1 and rm.hv[-1] == pytest.approx(1.0)
    rows[2]["status"] = "failed"  # trained, no usable score: an evaluation that adds nothing
    f = TabularBenchmark.from_csv(write_csv(tmp_path / "f.csv", rows))
    assert f.max_hypervolume == pytest.approx(m.max_hypervolume)
    rf = run_sampler(f, "grid")
    assert l31 in rf.layouts and len(rf.hv) == 4 and rf.hv[2] == rf.hv[1] and rf.hv[-1] == pytest.approx(1.0)
