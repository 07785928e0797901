"""Search spaces: the shipped YAML files, the grids they span, identity, and every error path."""

import dataclasses
import filecmp
import json
import pathlib
import subprocess
import sys
import textwrap

import pytest

from hlnas.model.catalog import PAPER_MIXERS
from hlnas.model.config import ModelConfig
from hlnas.data.sources import DataConfig
from hlnas.model.layout import Layout, build_layout
from hlnas.score.objectives import ScoreConfig
from hlnas.space import (
    OBJECTIVE_DIRECTIONS, SAMPLERS, Objective, SearchSpace, SpaceError, builtin_spaces, load_space, space_from_dict,
)
from hlnas.lm.trainer import TrainConfig

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHIPPED = ("tiny", "paper_grid", "placement", "hetero", "frontier")
# attention layers of the released m-a-p checkpoints (reference/paper_grid.md section 2), 0-based
RELEASED = {"pure": (), "24:1": (23,), "12:1": (11, 23), "6:1": (5, 11, 17, 23), "3:1": (2, 5, 8, 11, 14, 17, 20, 23)}


def write(tmp_path, text: str, name: str = "x.yaml") -> pathlib.Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


# -- the shipped files ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_spaces_load_and_validate_through_the_real_configs(name):
    s = load_space(name)
    assert s.name == name and s.source == str(ROOT / "search_spaces" / f"{name}.yaml")
    assert isinstance(s.model, ModelConfig) and s.model.n_layers == s.n_layers
    assert isinstance(s.train, TrainConfig) and isinstance(s.data, DataConfig)
    assert isinstance(s.score, ScoreConfig)
    assert s.sampler in SAMPLERS and all(o.metric in OBJECTIVE_DIRECTIONS for o in s.objectives)
    assert load_space(ROOT / "search_spaces" / f"{name}.yaml") == s
    assert load_space(f"{name}.yaml") == s


@pytest.mark.parametrize("name", SHIPPED)
def test_package_copy_is_identical_to_the_repo_file(name):
    repo, pkg = ROOT / "search_spaces" / f"{name}.yaml", ROOT / "hlnas" / "spaces" / f"{name}.yaml"
    assert filecmp.cmp(repo, pkg, shallow=False), f"hlnas/spaces/{name}.yaml differs from search_spaces/{name}.yaml; copy it"
    assert load_space(pkg).fingerprint() == load_space(repo).fingerprint()


def test_builtin_names_cover_the_shipped_files():
    assert set(SHIPPED) <= set(builtin_spaces())


def test_paper_grid_is_the_papers_31_candidates():
    s = load_space("paper_grid")
    layouts = s.candidates()
    assert len(layouts) == 31 and len({str(x) for x in layouts}) == 31
    assert s.size() == 7 * 5 * 1  # combinations before dedup: the Transformer's 5 ratios collapse to one
    expected = {str(build_layout(m, r, 24)) for m in PAPER_MIXERS for r in RELEASED} | {"A" * 24}
    assert {str(x) for x in layouts} == expected
    for p, layout in zip(s.grid(), layouts):
        if p["mixer"] == "transformer":
            assert layout.attention_layers == tuple(range(24))
        else:
            assert layout.attention_layers == RELEASED[p["ratio"]], p
            assert set(layout.mixers) - {"attention"} == {p["mixer"]}
    assert s.sampler == "grid" and [o.metric for o in s.objectives] == ["recall", "kv_cache_bytes", "val_loss"]
    assert s.recall_source() == "mqar_acc"
    assert [o.direction for o in s.objectives] == ["maximize", "minimize", "minimize"]


def test_a_paper_grid_is_decided_by_its_candidates_not_its_name():
    grid = load_space("paper_grid")
    assert grid.is_paper_grid and grid.with_overrides(name="renamed").is_paper_grid
    assert load_space("paper_grid_h200_lr").is_paper_grid  # the H200 grids get the paper overlay too
    assert grid.with_overrides(mixers=["gla"], ratios=["6:1"], include_transformer=False).is_paper_grid  # a sub-grid
    assert grid.with_overrides(mixers=["transformer"], ratios=[]).is_paper_grid  # the paper's Transformer alone
    not_paper = {
        "a front placement": grid.with_overrides(placements=["paper", "front"]),
        "explicit attention layers": grid.with_overrides(attention_sets=[[0, 12]]),
        "12 layers": grid.with_overrides(n_layers=12, ratios=["pure", "12:1", "6:1", "3:1"]),
        "a mamba2 mixer": grid.with_overrides(mixers=["gla", "mamba2"]),
        "a 2:1 ratio": grid.with_overrides(ratios=["pure", "2:1"]),
        "hetero blocks": grid.with_overrides(hetero_ratio="6:1", mixers=["gla", "deltanet"]),
    }
    assert [why for why, s in not_paper.items() if s.is_paper_grid] == []
    assert not load_space("placement").is_paper_grid and not load_space("tiny").is_paper_grid


def test_placement_grid_counts():
    s = load_space("placement")
    layouts = s.candidates()
    # per mixer: 24:1 has 4 distinct placements (back == paper), 12:1/6:1/3:1 five each, plus 2 explicit sets
    assert len(layouts) == 6 * (4 + 5 + 5 + 5 + 2) == 126
    gla = [x for x in layouts if x.linear_mixers == ("gla",)]
    assert len(gla) == 21
    assert {x.attention_layers for x in gla if len(x.attention_layers) == 1} == {(23,), (0,), (11,), (12,)}
    assert (0, 12) in {x.attention_layers for x in gla} and (0, 6, 12, 18) in {x.attention_layers for x in gla}
    assert "explicit:0,12" in s.params()["placement"] and "explicit" in s.placements


def test_hetero_layouts_have_the_chosen_mixer_in_each_block():
    s = load_space("hetero")
    assert s.params() == {f"block_{b}": ["gla", "deltanet", "gated_deltanet", "hgrn2"] for b in range(4)}
    layout = s.layout({"block_0": "gla", "block_1": "deltanet", "block_2": "gated_deltanet", "block_3": "hgrn2"})
    assert layout.attention_layers == (5, 11, 17, 23)
    assert [layout.mixers[6 * b] for b in range(4)] == ["gla", "deltanet", "gated_deltanet", "hgrn2"]
    assert all(len(set(layout.mixers[6 * b: 6 * b + 5])) == 1 for b in range(4))
    assert len(s.candidates()) == s.size() == 4 ** 4
    assert s.grid()[0] == {f"block_{b}": "gla" for b in range(4)}


def test_tiny_is_small_and_runs_on_cpu_shapes():
    s = load_space("tiny")
    layouts = s.candidates()
    assert len(layouts) == 11 and all(x.n_layers == 6 for x in layouts)
    assert s.sampler == "nsga2" and {o.metric for o in s.objectives} == {"recall", "kv_cache_bytes", "val_loss"}
    sc = s.score
    # the recall proxy trains to a target with a step cap (tests/test_cli_search.py runs it: under 5 minutes)
    assert s.train.tokens <= 60_000 and sc.mqar.steps <= 1200 and sc.mqar.target == 0.98
    assert s.recall_source() == "mqar_acc" and s.calibration.enabled


# -- params, layouts, grids -------------------------------------------------------------------------
def test_params_and_layout_round_trip():
    s = load_space("placement")
    points = s.grid()
    layouts = [s.layout(p) for p in points]
    assert layouts == s.candidates()
    assert len({str(x) for x in layouts}) == len(points)  # deduplicated
    for p, layout in zip(points, layouts):
        assert all(p[k] in v for k, v in s.params().items())
        assert Layout.parse(str(layout)) == layout


def test_irrelevant_params_are_ignored():
    s = load_space("paper_grid")
    t = s.layout({"mixer": "transformer"})
    assert t == s.layout({"mixer": "transformer", "ratio": "3:1", "placement": "paper"})
    assert s.layout({"mixer": "gla", "ratio": "pure"}) == build_layout("gla", "pure", 24)
    h = load_space("hetero")
    point = {f"block_{b}": "gla" for b in range(4)}
    assert h.layout({**point, "mixer": "unused"}) == h.layout(point)


def test_grid_refuses_to_enumerate_huge_spaces():
    s = space_from_dict({"mixers": ["gla", "deltanet", "hgrn", "hgrn2", "retnet"], "hetero": {"ratio": "2:1"}})
    assert s.size() == 5 ** 12
    with pytest.raises(SpaceError, match="244,140,625 combinations, more than grid"):
        s.grid()


def test_layout_rejects_points_outside_the_space():
    s = load_space("paper_grid")
    with pytest.raises(SpaceError, match=r"params\['ratio'\]='2:1' is not in this space; allowed: pure, 24:1"):
        s.layout({"mixer": "gla", "ratio": "2:1", "placement": "paper"})
    with pytest.raises(SpaceError, match="params lack 'placement'"):
        s.layout({"mixer": "gla", "ratio": "6:1"})


def test_grid_keeps_the_transformer_once_and_pure_once_per_mixer():
    s = space_from_dict({"mixers": ["gla", "deltanet", "transformer"], "ratios": ["pure", "6:1", "3:1"],
                         "placements": ["paper", "front", "back"]})
    assert s.include_transformer and s.mixers == ("gla", "deltanet")
    layouts = [str(x) for x in s.candidates()]
    assert layouts.count("A" * 24) == 1 and layouts.count("G" * 24) == 1 and layouts.count("D" * 24) == 1
    assert len(layouts) == 2 * (1 + 2 * 3) + 1


def test_explicit_sets_ignore_the_ratio():
    s = space_from_dict({"mixers": ["gla"], "ratios": ["6:1", "3:1"], "attention_sets": ["0,12", [3, 1]], "layers": 24})
    assert s.placements == ("explicit",) and s.attention_sets == ((0, 12), (1, 3))
    assert [x.attention_layers for x in s.candidates()] == [(0, 12), (1, 3)]


# -- identity: to_dict, fingerprint, diff, overrides -------------------------------------------------
@pytest.mark.parametrize("name", SHIPPED)
def test_to_dict_round_trips(name):
    s = load_space(name)
    d = s.to_dict()
    assert json.loads(json.dumps(d)) == d
    again = space_from_dict(d)
    assert again.to_dict() == d and again.fingerprint() == s.fingerprint()
    assert again.source is None and dataclasses.replace(again, source=s.source) == s


def test_the_space_holds_frozen_configs_and_stores_them_whole():
    s = load_space("tiny")
    assert (s.model.n_layers, s.model.d_model, s.train.tokens, s.score.objectives) == (6, 64, 32768, ("val_loss", "mqar"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.train.tokens = 1
    stored = s.to_dict()["scale"]
    # train/data/score whole (a stored study says what ran, defaults included); the model as its preset's changes
    assert stored["train"] == s.train.to_dict() and set(stored["train"]) == {f.name for f in dataclasses.fields(TrainConfig)}
    assert stored["model"] == {"mixer_hparams": s.model.mixer_hparams}
    # a space stored by an older hlnas held only the keys its file gave: it reads back as the same space
    sparse = {**s.to_dict(), "scale": {**stored, "train": {"tokens": 32768, "seq_len": 64, "batch_size": 8, "lr": 3e-3,
                                                            "val_batches": 4}, "data": {"source": "synthetic"}}}
    sparse.pop("calibration")
    old = space_from_dict(sparse, where="stored")
    assert old.fingerprint() == s.fingerprint() and old.diff(s) == []
    # a new preset takes effect under the same model overrides
    bigger = s.with_overrides(preset="proxy-small")
    assert (bigger.model.d_model, bigger.model.n_layers, bigger.model.mixer_hparams) == (128, 6, s.model.mixer_hparams)


def test_trial_specs_carry_the_spaces_config_objects_across_processes():
    import pickle

    from hlnas.search.records import layout_spec

    s = load_space("tiny")
    spec = layout_spec(s, 3, str(s.candidates()[1]), seed=7)
    back = pickle.loads(pickle.dumps(spec))
    assert back == spec and back.layout == str(s.candidates()[1]) and back.recipe.layout == s.candidates()[1]
    assert (back.recipe.model, back.recipe.data, back.recipe.score) == (s.model, s.data, s.score)
    assert back.recipe.train == dataclasses.replace(s.train, seed=7) and s.train.seed == 0


def test_fingerprint_is_stable_and_sensitive(tmp_path):
    s = load_space("tiny")
    assert s.fingerprint() == load_space("tiny").fingerprint()
    code = "from hlnas.space import load_space; print(load_space('tiny').fingerprint())"
    other_process = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert other_process == s.fingerprint()
    assert s.with_overrides(name="renamed").fingerprint() == s.fingerprint()
    changed = [s.with_overrides(ratios=["pure", "3:1"]), s.with_overrides(sampler="tpe"),
               s.with_overrides(train=dataclasses.replace(s.train, tokens=65536)), s.with_overrides(kv_context=8192),
               s.with_overrides(constraints={"max_params": 1e6}),
               s.with_overrides(objectives=[Objective(name="recall", metric="recall", direction="maximize")]),
               s.with_overrides(calibration={"seeds": 3})]
    assert len({c.fingerprint() for c in changed} | {s.fingerprint()}) == len(changed) + 1


def test_diff_names_each_change():
    s = space_from_dict({"mixers": ["gla"], "ratios": ["pure", "6:1"], "scale": {"train": {"tokens": 32768}}})
    t = s.with_overrides(ratios=["pure", "3:1"], train={"tokens": 65536, "lr": 2e-3}, name="other")
    assert t.diff(t) == [] and s.diff(s.with_overrides(name="x")) == []
    assert s.diff(t) == [
        "ratios: ['pure', '6:1'] -> ['pure', '3:1']",
        "scale.train.tokens: 32768 -> 65536",
        "scale.train.lr: 0.001 -> 0.002",  # the stored space holds every setting, defaults included
    ]


def test_with_overrides_revalidates():
    s = load_space("tiny")
    with pytest.raises(SpaceError, match=r"ratios\[1\]='4:1' is not allowed; allowed: pure, 6:1, 3:1 \(or any r:1"):
        s.with_overrides(ratios=["pure", "4:1"])
    with pytest.raises(SpaceError, match="unknown SearchSpace field 'ratio'. Did you mean: ratios?"):
        s.with_overrides(ratio=["pure"])
    h = s.with_overrides(hetero_ratio="3:1")
    assert h.params() == {"block_0": ["hgrn", "hgrn2"], "block_1": ["hgrn", "hgrn2"]}
    assert not h.include_transformer and h.source == s.source


def test_result_keys_for_recall():
    s = load_space("tiny")
    assert s.recall_source() == "mqar_acc" and s.result_key("kv_cache_bytes") == "kv_cache_bytes"
    r = s.with_overrides(score={"objectives": ["val_loss", "ruler", "mqar"]})
    assert r.recall_source() == "ruler_avg" and r.result_key("ruler") == "ruler_avg" and r.result_key("recall") == "recall"
    recall = [{"name": "recall", "metric": "recall"}, {"name": "kv", "metric": "kv_cache_bytes"}]
    m = s.with_overrides(score={"objectives": ["val_loss", "mqar_mixed"]}, objectives=recall,
                         train=dataclasses.replace(s.train, recall_every=1, recall_format="mqar", recall_length=32))
    assert m.recall_source() == "mqar_mixed_acc"
    with pytest.raises(SpaceError, match="mqar_mixed, which scores the MQAR instances mixed into training: set "
                                         "scale.train.recall_format: mqar and scale.train.recall_every >= 1"):
        s.with_overrides(score={"objectives": ["val_loss", "mqar_mixed"]}, objectives=recall)


def test_defaults():
    s = space_from_dict({"mixers": ["gdn"], "ratios": ["6:1"]})
    assert s.mixers == ("gated_deltanet",) and s.n_layers == 24 and s.sampler == "nsga2" and s.kv_context == 4096
    assert s.objectives == (Objective(name="recall", metric="recall", direction="maximize"),
                            Objective(name="kv_cache", metric="kv_cache_bytes", direction="minimize"))
    assert s.placements == ("paper",) and s.constraints == {} and s.preset == "proxy-tiny"
    short = space_from_dict({"mixers": ["gla"], "ratios": ["pure"], "objectives": ["val_loss", {"name": "params"}]})
    assert short.objectives == (Objective(name="val_loss", metric="val_loss", direction="minimize"),
                                Objective(name="params", metric="params", direction="minimize"))


def test_unquoted_ratios_stay_ratios(tmp_path):
    p = write(tmp_path, "mixers: [gla]\nratios: [pure, 6:1, 3:1]\n")  # YAML 1.1 would read 6:1 as 361
    assert load_space(p).ratios == ("pure", "6:1", "3:1")


def test_importing_the_module_pulls_in_neither_torch_nor_optuna():
    code = "import sys, hlnas.space; print('torch' in sys.modules, 'optuna' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


# -- every error names the file, the key, the bad value and what is allowed --------------------------
ERRORS = [
    ("mixers: [gla]\nratios: [pure, '6:1', '5:1']\n",
     "{p}: ratios[2]='5:1' is not allowed; allowed: pure, 24:1, 12:1, 6:1, 3:1 (or any r:1 with r dividing layers=24)"),
    ("mixers: [gla]\nratios: [pure, '24:1']\nlayers: 6\n",
     "{p}: ratios[1]='24:1' is not allowed; allowed: pure, 6:1, 3:1 (or any r:1 with r dividing layers=6)"),
    ("mixers: [gla]\nratios: ['6:1', '6']\n", "{p}: ratios[1]='6:1' repeats ratios[0]"),
    ("mixers: [gla]\nratio: [pure]\n", "{p}: unknown key 'ratio'. Did you mean: ratios? Allowed: name, mixers, ratios"),
    ("mixers: [gdn2x]\nratios: [pure]\n", "{p}: mixers[0]='gdn2x' is not allowed; allowed: hgrn, hgrn2, retnet, gla"),
    ("mixers: [attention]\nratios: [pure]\n", "{p}: mixers[0]='attention' is not allowed; allowed:"),
    ("mixers: gla\nratios: [pure]\n", "{p}: mixers='gla' must be a list"),
    ("ratios: [pure]\n", "{p}: 'mixers' is required; allowed: hgrn, hgrn2"),
    ("mixers: [gla]\n", "{p}: 'ratios' is required, e.g. ratios: [pure, '6:1']; allowed: pure, 24:1"),
    ("mixers: [gla]\nratios: ['6:1']\nplacements: [paper, top]\n",
     "{p}: placements[1]='top' is not allowed; allowed: paper, front, back, middle, spread, group ('explicit' needs attention_sets)"),
    ("mixers: [gla]\nratios: ['6:1']\nplacements: [explicit]\n", "{p}: placements[0]='explicit' is not allowed"),
    ("mixers: [gla]\nratios: ['6:1']\nattention_sets: [[0, 30]]\n",
     "{p}: attention_sets[0][1]=30 is not allowed; allowed: a layer index in [0, 24) (layers=24)"),
    ("mixers: [gla]\nratios: ['6:1']\nattention_sets: [[0, 0]]\n", "{p}: attention_sets[0][1]=0 repeats attention_sets[0][0]"),
    ("mixers: [gla]\nratios: ['6:1']\nattention_sets: [[]]\n", "{p}: attention_sets[0]=[] must hold between 1 and 23"),
    ("mixers: [gla]\nratios: ['6:1']\ntransformer: yes please\n", "{p}: transformer='yes please' must be true or false"),
    ("mixers: [gla]\nratios: ['6:1']\nlayers: six\n", "{p}: layers='six' must be a positive integer"),
    ("mixers: [gla]\nratios: ['6:1']\nlayers: 12\nscale: {model: {n_layers: 24}}\n",
     "{p}: layers=12 disagrees with scale.model.n_layers=24"),
    ("mixers: [gla]\nratios: ['6:1']\nsampler: cmaes\n",
     "{p}: sampler='cmaes' is not allowed; allowed: nsga2, tpe, gp, random, grid"),
    ("mixers: [gla]\nratios: ['6:1']\nsampler: nsga\n", "{p}: sampler='nsga' is not allowed; allowed: nsga2, tpe, gp, random, grid. Did you mean: nsga2?"),
    ("mixers: [gla]\nratios: ['6:1']\nobjectives: [{metric: acc}]\n",
     "{p}: objectives[0].metric='acc' is not allowed; allowed: recall, recall_auc, recall_beyond, lm_acc, val_loss, kv_cache_bytes"),
    ("mixers: [gla]\nratios: ['6:1']\nobjectives: [{metric: mqar_acc}]\n",
     "{p}: objectives[0].metric='mqar_acc' is a raw recall score, which a model with no key-to-value association can "
     "reach (copying any in-context value scores 1/K); use metric: recall"),
    ("mixers: [gla]\nratios: ['6:1']\nobjectives: [{metric: val_loss, direction: max}]\n",
     "{p}: objectives[0].direction='max' is not allowed; allowed: maximize, minimize"),
    ("mixers: [gla]\nratios: ['6:1']\nobjectives: [{metric: val_loss, weight: 2}]\n",
     "{p}: unknown key 'objectives[0].weight'. Allowed in objectives[0]: name, metric, direction"),
    ("mixers: [gla]\nratios: ['6:1']\nobjectives: [val_loss, {name: val_loss, metric: params}]\n",
     "{p}: objectives[1].name='val_loss' repeats objectives[0].name"),
    ("mixers: [gla]\nratios: ['6:1']\nobjectives: [{name: recall, metric: lm_acc}]\n",
     "{p}: objectives[0] (metric 'lm_acc') needs 'lm_eval' in scale.score.objectives; got ['val_loss', 'mqar']"),
    ("mixers: [gla]\nratios: ['6:1']\nobjectives: [lm_acc]\nscale: {score: {objectives: [val_loss]}}\n",
     "{p}: objectives[0] (metric 'lm_acc') needs 'lm_eval' in scale.score.objectives; got ['val_loss']"),
    ("mixers: [gla]\nratios: ['6:1']\nconstraints: {max_kv: 10}\n",
     "{p}: unknown key 'constraints.max_kv'. Did you mean: max_kv_bytes? Allowed in constraints: max_params, max_kv_bytes,"),
    ("mixers: [gla]\nratios: ['6:1']\nconstraints: {max_params: -5}\n",
     "{p}: constraints.max_params=-5 is not allowed; allowed: a positive number (upper bound on params)"),
    ("mixers: [gla]\nratios: ['6:1']\nscale: {preset: proxy-huge}\n",
     "{p}: scale.preset='proxy-huge' is not allowed; allowed: paper-340m, paper-1.3b, proxy-tiny, proxy-small, proxy-gpu"),
    ("mixers: [gla]\nratios: ['6:1']\nscale: {tokens: 5}\n", "{p}: unknown key 'scale.tokens'. Allowed in scale: preset, model"),
    ("mixers: [gla]\nratios: ['6:1']\nscale: {train: {tokns: 5}}\n",
     "{p}: scale.train: unknown train key 'tokns'. Did you mean: tokens? Allowed:"),
    ("mixers: [gla]\nratios: ['6:1']\nscale: {train: {tokens: 0}}\n", "{p}: scale.train: train.tokens must be >= 1, got 0"),
    ("mixers: [gla]\nratios: ['6:1']\nscale: {model: {d_modl: 5}}\n",
     "{p}: scale.model: unknown model config key 'd_modl'. Did you mean: d_model?"),
    ("mixers: [gla]\nratios: ['6:1']\nscale: {model: {preset: proxy-gpu}}\n", "{p}: scale.model.preset: put the preset at scale.preset"),
    ("mixers: [gla]\nratios: ['6:1']\nscale: {data: {sorce: x}}\n", "{p}: scale.data: unknown data config key 'sorce'"),
    ("mixers: [gla]\nratios: ['6:1']\nscale: {score: {objectives: [mqar, bleu]}}\n",
     "{p}: scale.score: unknown objective 'bleu'. Allowed: val_loss, ruler, mqar, mqar_mixed, lm_eval"),
    ("mixers: [gla]\nratios: ['6:1']\nscale: {kv_context: 0}\n", "{p}: scale.kv_context=0 must be a positive integer"),
    ("mixers: [gla]\nratios: ['6:1']\nhetero: {ratio: '6:1'}\n", "{p}: 'ratios' cannot be used with 'hetero'"),
    ("mixers: [gla]\nhetero: {ratio: pure}\n",
     "{p}: hetero.ratio='pure' is not allowed; allowed: 24:1, 12:1, 6:1, 3:1 (or any r:1 with r dividing layers=24)"),
    ("mixers: [gla]\nhetero: {ratio: '6:1', blocks: 4}\n", "{p}: unknown key 'hetero.blocks'. Allowed in hetero: ratio"),
    ("mixers: [gla, deltanet]\nhetero: {ratio: '6:1'}\ntransformer: true\n", "{p}: 'transformer' cannot be used with 'hetero'"),
    ("mixers: [gla, deltanet, hgrn, hgrn2, retnet]\nhetero: {ratio: '2:1'}\nsampler: grid\n",
     "{p}: sampler='grid' over 244,140,625 combinations (more than 100,000)"),
    ("mixers: []\nratios: [pure]\n", "{p}: mixers is empty; list at least one of "),
    ("- gla\n- deltanet\n", "{p}: the space must be a mapping, got list"),
    ("mixers: [gla\n", "{p}: not valid YAML"),
    ("", "{p}: the file is empty"),
]


@pytest.mark.parametrize("text,message", ERRORS, ids=[f"e{i}" for i in range(len(ERRORS))])
def test_every_error_names_file_key_value_and_allowed(tmp_path, monkeypatch, text, message):
    monkeypatch.chdir(tmp_path)
    p = write(tmp_path, text, "bad.yaml")
    with pytest.raises(SpaceError) as e:
        load_space(p)
    assert str(e.value).startswith(message.format(p="bad.yaml")), str(e.value)


def test_missing_space_lists_the_builtin_ones():
    with pytest.raises(SpaceError, match=r"search space 'tinny' not found.*Did you mean: tiny\? Built-in: .*paper_grid"):
        load_space("tinny")
    with pytest.raises(SpaceError, match="search space 'no/such/file.yaml' not found"):
        load_space("no/such/file.yaml")


def test_space_error_is_an_hlnas_value_error():
    from hlnas.errors import HlnasError

    assert issubclass(SpaceError, HlnasError) and issubclass(SpaceError, ValueError)
    with pytest.raises(SpaceError, match=r"^<dict>: mixers\[0\]='x'"):
        space_from_dict({"mixers": ["x"], "ratios": ["pure"]})
    assert isinstance(space_from_dict({"mixers": [], "transformer": True}), SearchSpace)


def test_the_alternative_scales_in_paper_grid_comments_validate():
    """The GPU and paper-scale blocks quoted in paper_grid.yaml's comments are real, valid scale sections."""
    import re

    from hlnas.pipeline.recipe import yaml_load

    text = (ROOT / "search_spaces" / "paper_grid.yaml").read_text()
    blocks = re.findall(r"#     (scale: .*?)\n#   [(\w]", text, re.S)
    assert len(blocks) == 2
    s = load_space("paper_grid")
    for block in blocks:
        scale = yaml_load("\n".join(line.lstrip("#").strip() for line in block.splitlines()))["scale"]
        t = s.with_overrides(**scale)
        assert t.preset in ("proxy-gpu", "paper-340m") and len(t.candidates()) == 31
        assert t.recall_source() == "ruler_avg"  # RULER is scored at these scales
