"""Issue #20 point 5's analysis: which placement a layout has (hlnas.model.layout.placement_of), collect.py's placement and
ratio columns for a placement study, and experiments/paper_grid/placement.py's verdicts on tables whose answers are
known. No training: trials are written with optuna's create_trial."""

from __future__ import annotations


import optuna
import pytest

from hlnas.model.layout import PLACEMENTS, Layout, attention_indices, build_layout, placement_of
from hlnas.space import load_space
from tests.helpers import paper_grid_script, write_csv
from tests.test_paper_grid_tools import ROOT

collect = paper_grid_script("collect")
placement = paper_grid_script("placement")
TINY = str(ROOT / "experiments" / "paper_grid" / "placement_tiny.yaml")


# -- placement_of -----------------------------------------------------------------------------------

@pytest.mark.parametrize("n, ratio", [(24, "6:1"), (24, "3:1"), (24, "12:1"), (6, "3:1")])
def test_placement_of_names_every_strategy_that_built_the_layout(n, ratio):
    seen = {}
    # group counts r linear layers per attention layer, so its layouts are other ratios' (24 layers, group 3:1 is paper
    # 4:1): tests/test_layout.py::test_group_placement_is_r_linear_layers_then_attention
    for name in (p for p in PLACEMENTS if p != "group"):
        lay = build_layout("hgrn", ratio, n, name)
        seen.setdefault(lay.attention_layers, name)  # two strategies giving one set: the first listed names it
        assert placement_of(lay) == seen[lay.attention_layers]
    assert placement_of(build_layout("hgrn", ratio, n, "paper")) == "paper"


def test_placement_of_calls_the_rest_explicit_and_has_none_for_pure_or_all_attention():
    assert placement_of(build_layout("gla", None, 24, [1, 4, 7, 10, 13, 16, 19, 22])) == "explicit:1,4,7,10,13,16,19,22"
    assert placement_of(Layout.parse("HAAHHH")) == "explicit:1,2"  # 2 of 6: paper would be [2, 5]
    assert placement_of(Layout.parse("HAHHH")) == "explicit:1"  # 1 of 5: a ratio, but no strategy puts it there
    assert placement_of(build_layout("hgrn", "24:1", 24, "back")) == "paper"  # at 24:1 back is the paper placement
    assert placement_of(build_layout("hgrn", "pure", 24)) is None
    assert placement_of(build_layout("transformer", None, 24)) is None
    assert attention_indices(6, "6:1", "spread") == (3,)  # the CPU twin's layouts below rely on it


@pytest.mark.parametrize("protocol", ["b256", "k64_b256", "shift", "lr", "vt_shift", "vt_split", "vt_split_8k"])
def test_the_placement_extension_runs_the_grids_recall_protocol_so_it_may_borrow_its_calibration(protocol):
    """experiments/paper_grid/placement_h200_<protocol>.yaml takes paper_grid_h200_<protocol>'s calibration
    (--calibrated-by), which is honest only while the two spaces' depth, scale and calibration are the same: an edit to
    one alone fails here."""
    from hlnas.search.calibration import protocol_differences

    grid = load_space(str(ROOT / "search_spaces" / f"paper_grid_h200_{protocol}.yaml"))
    place = load_space(str(ROOT / "experiments" / "paper_grid" / f"placement_h200_{protocol}.yaml"))
    assert protocol_differences(grid, place) == [] and set(place.mixers) <= set(grid.mixers)
    assert set(place.mixers) == {"hgrn2", "gated_deltanet"} and set(place.ratios) == {"6:1", "3:1"}
    assert {"paper", "front", "back", "middle", "spread"} <= set(place.placements) and place.attention_sets
    changed = place.with_sets(["score.mqar.batch=32"])
    assert protocol_differences(grid, changed) == [f"scale.score.mqar.batch: {grid.score.mqar.batch} -> 32"]
    from hlnas.calibration.protocol import plan

    assert plan(place)  # its calibration section is valid for its own mixers (e.g. no mixer_order of the grid's)


def test_the_boundary_seeds_space_is_the_grids_24_and_12_to_1_cells_on_its_protocol_at_seed_2():
    """experiments/paper_grid/boundary_seeds_h200_lr.yaml borrows paper_grid_h200_lr's calibration for more seeds of the
    cells whose two seeds disagreed: the same protocol, the grid's own layouts of those ratios, a seed the grid has not."""
    from hlnas.search.calibration import protocol_differences

    grid = load_space(str(ROOT / "search_spaces" / "paper_grid_h200_lr.yaml"))
    seeds = load_space(str(ROOT / "experiments" / "paper_grid" / "boundary_seeds_h200_lr.yaml"))
    assert protocol_differences(grid, seeds) == [] and seeds.train.seed == 2 != grid.train.seed
    edge = {str(grid.layout(p)) for p in grid.grid() if p.get("ratio") in ("24:1", "12:1")}
    assert {str(seeds.layout(p)) for p in seeds.grid()} == edge and len(edge) == 12


def test_the_cpu_placement_twin_runs_the_default_spaces_recall_protocol():
    """placement_tiny.yaml borrows the default study's calibration (--calibrated-by tiny): honest only while the two
    spaces' depth, scale and calibration are the same."""
    from hlnas.search.calibration import protocol_differences

    tiny, place = load_space(str(ROOT / "search_spaces" / "tiny.yaml")), load_space(TINY)
    assert protocol_differences(tiny, place) == [] and set(place.mixers) == set(tiny.mixers)
    assert len(place.candidates()) == 22 and not place.include_transformer


def test_the_shift_twin_changes_the_cpu_twins_recall_protocol_by_the_attention_input_convolution_only():
    """placement_tiny_shift.yaml answers "is it the convolution?" only while that is its one change: the attention
    layers' input convolution (the H100 protocol's, started as the shift), and the short convolutions the recall
    model's mixer_hparams must repeat because they replace the candidate's mapping."""
    from hlnas.search.calibration import protocol_differences

    twin, shift = load_space(TINY), load_space(str(ROOT / "experiments" / "paper_grid" / "placement_tiny_shift.yaml"))
    diffs = protocol_differences(twin, shift)
    assert [d.split(":")[0] for d in diffs] == [
        "scale.score.mqar.model.mixer_hparams.attention.input_conv",
        "scale.score.mqar.model.mixer_hparams.attention.input_conv_init",
        "scale.score.mqar.model.mixer_hparams.hgrn.use_short_conv",
        "scale.score.mqar.model.mixer_hparams.hgrn2.use_short_conv"]
    model = shift.to_dict()["scale"]["model"]["mixer_hparams"]
    recall_model = shift.to_dict()["scale"]["score"]["mqar"]["model"]["mixer_hparams"]
    assert {m: recall_model[m] for m in model} == model  # repeated, not changed
    assert recall_model["attention"] == {"input_conv": 4, "input_conv_init": "shift"}
    assert shift.to_dict()["scale"]["train"] == twin.to_dict()["scale"]["train"]  # the LM half is the twin's


def test_the_deep_cpu_twin_is_the_shift_twin_at_the_h100_depth():
    """placement_deep_cpu.yaml tests the H100's depth effect at CPU size only while depth (with the zero residual init
    that depth needs) is what it changes from the shift twin: hgrn is not among its mixers, and its calibration asks for
    the one mixer it has at its one ratio."""
    from hlnas.search.calibration import protocol_differences

    shift = load_space(str(ROOT / "experiments" / "paper_grid" / "placement_tiny_shift.yaml"))
    deep = load_space(str(ROOT / "experiments" / "paper_grid" / "placement_deep_cpu.yaml"))
    keys = {d.split(":")[0] for d in protocol_differences(shift, deep)}
    assert keys == {"layers", "scale.score.mqar.model.residual_init", "calibration.hybrid_ratio",
                    "calibration.pure_below_min_mixers", "scale.model.mixer_hparams.hgrn.use_short_conv",
                    "scale.score.mqar.model.mixer_hparams.hgrn.use_short_conv"}
    assert deep.mixers == ("hgrn2",) and deep.n_layers == 24 and len(deep.candidates()) == 4
    # its other-mixer twin: the same protocol for HGRN (its short conv)
    mixers = load_space(str(ROOT / "experiments" / "paper_grid" / "placement_deep_cpu_mixers.yaml"))
    keys = {d.split(":")[0] for d in protocol_differences(deep, mixers)}
    assert {k for k in keys if "use_short_conv" not in k} == set()
    assert mixers.mixers == ("hgrn",) and mixers.n_layers == 24


# -- collect.py on a placement study ------------------------------------------------------------------

def test_collect_labels_each_placement_row_with_its_own_ratio_and_placement(tmp_path):
    """The explicit 3:1 set [1, 4] reaches the grid with ratio 6:1 in its params (the first listed): the row must say
    3:1, or the analysis would set a 2-attention-layer model among the 1-layer ones."""
    space = load_space(TINY)
    url = f"sqlite:///{tmp_path}/p.db"
    study = optuna.create_study(storage=url, study_name="placement_tiny", directions=["maximize", "minimize", "minimize"])
    study.set_user_attr("hlnas_space", space.to_dict())
    rows = collect.rows(study)
    assert len(rows) == 22 and {r["status"] for r in rows} == {"not run"}
    by = {r["layout"]: r for r in rows}
    assert (by["HAHHAH"]["ratio"], by["HAHHAH"]["placement"]) == ("3:1", "explicit:1,4")
    assert (by["NANNNN"]["ratio"], by["NANNNN"]["placement"]) == ("6:1", "explicit:1")
    assert (by["HHAHHA"]["ratio"], by["HHAHHA"]["placement"]) == ("3:1", "paper")
    assert (by["AHHHHA"]["ratio"], by["AHHHHA"]["placement"]) == ("3:1", "spread")
    assert sorted(r["placement"] for r in rows if r["mixer"] == "hgrn" and r["ratio"] == "6:1") == \
        ["explicit:1", "front", "middle", "paper", "spread"]


def test_collect_gives_a_borrowing_study_the_lenders_calibration_runs_until_its_own_trial_ran(tmp_path, capsys):
    """A placement study borrowed the grid's calibration (--calibrated-by): its paper rows show the lender's calibration
    runs (recall only) at every seed until the study's own trial of that layout ran; collect.main finds the lender."""
    space = load_space(TINY)
    url = f"sqlite:///{tmp_path}/p.db"
    paper31, paper61 = str(build_layout("hgrn", "3:1", 6)), str(build_layout("hgrn", "6:1", 6))
    run = lambda key, lay, seed, raw: {"key": key, "layout": lay, "seed": seed, "status": "ok", "recall_raw": raw,  # noqa: E731
                                       "recall_baseline": 0.25, "recall": (raw - 0.25) / 0.75, "mqar_s": 9.0}
    lend = optuna.create_study(storage=url, study_name="tiny", directions=["maximize", "minimize", "minimize"])
    lend.set_user_attr("hlnas_calibration", {"status": "valid", "runs": {
        "hybrid:hgrn:s0": run("hybrid:hgrn:s0", paper31, 0, 0.97), "hybrid:hgrn:s1": run("hybrid:hgrn:s1", paper31, 1, 0.94),
        "ladder:hgrn:s0": run("ladder:hgrn:s0", paper61, 0, 0.91)}})
    study = optuna.create_study(storage=url, study_name="placement_tiny", directions=["maximize", "minimize", "minimize"])
    study.set_user_attr("hlnas_space", space.to_dict())
    study.set_user_attr("hlnas_calibration", {"status": "valid", "verdict": {}, "borrowed_from": {"study": "tiny"}})
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.COMPLETE, values=[0.5, 1.0, 2.0], user_attrs={
        "layout": paper61, "status": "ok", "recall_raw": 0.99, "recall_baseline": 0.25, "recall": 0.9867, "val_loss": 1.9}))
    assert collect.lender(study) == "tiny" and collect.lender(lend) is None
    by = {(r["seed"], r["layout"]): r for r in collect.rows(study, lent=lend)}
    assert (by[(0, paper31)]["recall_raw"], by[(0, paper31)]["val_loss"]) == (0.97, None)
    assert by[(0, paper31)]["source"] == "tiny calibration hybrid:hgrn:s0 (recall only)"
    assert by[(1, paper31)]["recall_raw"] == 0.94 and by[(1, paper31)]["placement"] == "paper"
    assert by[(0, paper61)]["source"] == "placement_tiny#0" and by[(0, paper61)]["val_loss"] == 1.9  # its own trial wins
    assert by[(0, str(build_layout("hgrn", "3:1", 6, placement="front")))]["status"] == "not run"
    assert {r["seed"] for r in by.values()} == {0, 1}
    assert {r["status"] for r in collect.rows(study) if r["layout"] == paper31} == {"not run"}  # without the lender
    out = tmp_path / "p.csv"
    assert collect.main(["--storage", url, "--study", "placement_tiny", "--out", str(out)]) == 0
    assert "tiny calibration hybrid:hgrn:s1 (recall only)" in out.read_text()
    # a lender the storage lacks (kept elsewhere) is a warning, and the rows it would have given are 'not run'
    optuna.delete_study(study_name="tiny", storage=url)
    capsys.readouterr()
    assert collect.main(["--storage", url, "--study", "placement_tiny", "--out", str(out)]) == 0
    assert "warning" in capsys.readouterr().err and "tiny calibration" not in out.read_text()


# -- placement.py -------------------------------------------------------------------------------------

def _row(mixer, ratio, place, seed, raw, auc, steps=None, base=0.25, layers="5", val_loss=None):
    rec = max(0.0, (raw - base) / (1 - base))
    return {"mixer": mixer, "ratio": ratio, "placement": place, "layout": f"{mixer}-{place}", "seed": str(seed),
            "attention_layers": layers, "status": "ok", "recall_raw": str(raw), "recall_baseline": str(base),
            "recall": str(rec), "recall_auc": str(auc), "mqar_steps_to_target": "" if steps is None else str(steps),
            "val_loss": "" if val_loss is None else str(val_loss)}


def _table():
    return [
        # hgrn 6:1: paper learns in both seeds, front never (at the baseline), middle ties paper
        _row("hgrn", "6:1", "paper", 0, 0.99, 0.80, 400), _row("hgrn", "6:1", "paper", 1, 0.98, 0.78, 500),
        _row("hgrn", "6:1", "middle", 0, 0.985, 0.79, 400), _row("hgrn", "6:1", "middle", 1, 0.99, 0.80, 400),
        _row("hgrn", "6:1", "front", 0, 0.26, 0.00), _row("hgrn", "6:1", "front", 1, 0.25, 0.00),
        # hgrn2 3:1: every placement learns, the gaps inside the seed spread
        _row("hgrn2", "3:1", "paper", 0, 0.99, 0.70, 600), _row("hgrn2", "3:1", "paper", 1, 0.99, 0.60, 700),
        _row("hgrn2", "3:1", "back", 0, 0.99, 0.66, 600), _row("hgrn2", "3:1", "back", 1, 0.99, 0.68, 600),
        # gla 6:1: one seed only
        _row("gla", "6:1", "paper", 0, 0.99, 0.80, 400), _row("gla", "6:1", "front", 0, 0.30, 0.02),
        # pure models and failed runs are not placements
        {**_row("hgrn", "pure", "", 0, 0.25, 0.0)},
        {**_row("hgrn", "6:1", "spread", 0, 0.99, 0.9), "status": "failed"},
    ]


def test_placement_verdicts_follow_the_calibrations_rule():
    text, v = placement.report(_table(), "t.csv")
    assert v[("hgrn", "6:1")]["recall"]["answer"] == "yes" and v[("hgrn", "6:1")]["recall"]["worst"] == "front"
    assert v[("hgrn", "6:1")]["recall_auc"]["answer"] == "yes"
    assert v[("hgrn2", "3:1")]["recall"]["answer"] == "no"  # equal recall: not separated by 0
    assert v[("hgrn2", "3:1")]["recall_auc"]["answer"] == "no"  # 0.67 vs 0.65: inside twice the 0.10 spread
    assert v[("gla", "6:1")]["recall"]["answer"] == "undecided"  # one seed: no spread to judge by
    assert set(v) == {("hgrn", "6:1"), ("hgrn2", "3:1"), ("gla", "6:1")}  # no pure row, no failed placement
    places = placement.groups(_table())[("hgrn", "6:1")]
    assert list(places) == ["paper", "front", "middle"]  # hlnas.model.layout.PLACEMENTS order, whatever the table's
    assert placement.versus_paper(places, "front", "recall") == "below"
    assert placement.versus_paper(places, "middle", "recall") == "tie"
    assert placement.versus_paper(places, "paper", "recall") == "-"
    # every recall beside its baseline; a placement at the baseline in every seed says so
    assert "| front | 5 | 0.260 / 0.250 | 0.250 |" in text and text.count("no recall") >= 1
    assert "in 1 of 2 decided (mixer, ratio) groups" in text


def test_placement_asks_the_same_of_the_lm_half_with_lower_val_loss_the_better():
    """Attention first can buy recall with LM quality (the H100 placement rows of 2026-12-05: HGRN-2 6:1 front
    2.34 / 2.18 against 1.72 with attention last): the report says so beside the recall verdicts."""
    rows = [_row("hgrn", "6:1", "paper", 0, 0.99, 0.8, 400, val_loss=1.70), _row("hgrn", "6:1", "paper", 1, 0.98, 0.8, 400, val_loss=1.72),
            _row("hgrn", "6:1", "back", 0, 0.26, 0.0, val_loss=1.69), _row("hgrn", "6:1", "back", 1, 0.25, 0.0, val_loss=1.71),
            _row("hgrn", "6:1", "front", 0, 0.99, 0.9, 300, val_loss=2.34), _row("hgrn", "6:1", "front", 1, 0.99, 0.9, 300, val_loss=2.18),
            # gla 3:1: recall only (a calibration's runs): no LM verdict
            _row("gla", "3:1", "paper", 0, 0.99, 0.8), _row("gla", "3:1", "paper", 1, 0.99, 0.8),
            _row("gla", "3:1", "front", 0, 0.99, 0.8), _row("gla", "3:1", "front", 1, 0.99, 0.8)]
    text, v = placement.report(rows, "t.csv")
    lm = v[("hgrn", "6:1")]["val_loss"]
    assert (lm["answer"], lm["best"], lm["worst"]) == ("yes", "back", "front")
    places = placement.groups(rows)[("hgrn", "6:1")]
    assert placement.versus_paper(places, "front", "val_loss") == "above"  # a higher loss than paper's, beyond spread
    assert placement.versus_paper(places, "back", "val_loss") == "tie"
    assert v[("gla", "3:1")]["val_loss"]["answer"] == "undecided"
    assert "| front | 5 | 0.990 / 0.990 |" in text and "| 2.340 / 2.180 | above |" in text
    assert "the LM's `val_loss` in 1 of 1" in text
    # lower loss with the same spread does not count as moved the other way
    flat = [{**r, "val_loss": "1.7"} for r in rows[:6]]
    assert placement.report(flat)[1][("hgrn", "6:1")]["val_loss"]["answer"] == "no"


def test_placement_command_writes_its_files_and_refuses_a_table_without_placements(tmp_path, capsys):
    rows = _table()
    path = write_csv(tmp_path / "p.csv", rows)
    assert placement.main(["--table", str(path), "--out", str(tmp_path / "o"), "--no-png"]) == 0
    assert (tmp_path / "o" / "placement.md").read_text().startswith("# Does placement move recall?")
    fig = placement.figure(rows)
    assert len(fig.data) == 2 * 3 * 2 - 2  # 2 panels x 3 groups x 2 seeds, less gla's missing seed 1 in both panels
    # an explicit placement's tick says "explicit" (its layers would overrun the next column); the data keep the name
    named = [{**r, "placement": "explicit:1,4"} if r["placement"] == "front" else r for r in rows]
    ticks = placement.figure(named).layout.xaxis.ticktext
    assert "explicit" in ticks and not any(":" in t for t in ticks)
    bare = write_csv(tmp_path / "bare.csv", [{k: v for k, v in r.items() if k != "placement"} for r in rows])
    assert placement.main(["--table", str(bare)]) == 2
    err = capsys.readouterr().err
    assert "no 'placement' column" in err and err.count("\n") == 1


def test_first_attention_split_says_whether_the_first_attention_layers_depth_decides_recall():
    # HGRN-2 6:1 on the H200 protocol (session 28): learned with the first attention layer at 0, 2 or 5, never at 10
    # or 20, in both seeds
    def place(name, layers, raws):
        return [_row("hgrn2", "6:1", name, s, raw, 0.5, layers=layers, base=0.016) for s, raw in enumerate(raws)]

    rows = (place("paper", "5 11 17 23", (0.99, 1.0)) + place("front", "0 1 2 3", (0.999, 0.985))
            + place("back", "20 21 22 23", (0.011, 0.012)) + place("middle", "10 11 12 13", (0.032, 0.016))
            + place("explicit:2,9,14,21", "2 9 14 21", (0.988, 1.0)))
    d = placement.first_attention_split(placement.groups(rows)[("hgrn2", "6:1")])
    assert (d["split"], d["learned"], d["never"]) == ("early", [0, 2, 5], [10, 20])
    text, _ = placement.report(rows)
    assert "learned in every seed: 0, 2, 5; that never did: 10, 20: **recall came only with an attention layer by layer 5**" in text
    # a placement that learned in one seed of two is neither side; interleaved depths are no split
    mixed = rows + place("spread", "0 8 15 23", (0.99, 0.02))
    assert placement.first_attention_split(placement.groups(mixed)[("hgrn2", "6:1")])["learned"] == [0, 2, 5]
    inter = rows + place("explicit:1,12", "1 12 13 14", (0.01, 0.01))
    d = placement.first_attention_split(placement.groups(inter)[("hgrn2", "6:1")])
    assert d["split"] is False and d["never"] == [1, 10, 20]
    assert "does not separate them" in placement.report(inter)[0]
    # the CPU twin's way round: attention in layer 0 never learned, every later first layer did
    late = place("paper", "5", (0.99, 0.99)) + place("front", "0", (0.02, 0.01)) + place("middle", "2", (0.9, 0.95))
    d = placement.first_attention_split(placement.groups(late)[("hgrn2", "6:1")])
    assert (d["split"], d["learned"], d["never"]) == ("late", [2, 5], [0])
    assert "recall came only with the first attention layer at 2 or later** (none learned with it at 0" in placement.report(late)[0]
    # nothing that never learned: nothing to split
    d = placement.first_attention_split(placement.groups(rows[:4])[("hgrn2", "6:1")])
    assert d["split"] is None and d["never"] == []


def test_the_family_grid_space_is_the_calibrated_grid_with_its_other_ratios_trained_by_the_calibration():
    """grid_family_h200_lr.yaml differs from the calibrated grid only by calibration.extra_ratios (24:1, 12:1): the
    same protocol and results, and its calibration trains all 31 layouts at both seeds, each seed-0 run a trial."""
    from hlnas.calibration.protocol import plan
    from hlnas.search.calibration import protocol_differences
    from hlnas.space import load_space

    grid = load_space("search_spaces/paper_grid_h200_lr.yaml")
    fam = load_space("experiments/paper_grid/grid_family_h200_lr.yaml")
    assert [d.split(":")[0] for d in grid.diff(fam)] == ["calibration.extra_ratios"]
    assert protocol_differences(grid, fam) == [] and grid.fingerprint() == fam.fingerprint()
    runs = plan(fam)
    assert len(runs) == 62 and len({r.layout for r in runs}) == 31
    assert {r.layout for r in runs if r.params is not None} == {str(lay) for lay in fam.candidates()}
