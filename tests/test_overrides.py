"""--set SECTION.KEY=VALUE: one parser for train, eval, search and calibrate, checked against the config's field types."""

from __future__ import annotations

import dataclasses
import json

import pytest

from hlnas.cli.main import main
from hlnas.errors import ConfigError
from hlnas.pipeline.recipe import apply_overrides, load_recipe
from hlnas.space import load_space

GLA = {"layout": {"mixer": "gla", "ratio": "6:1"}}


def _sets(*items: str) -> dict:
    return apply_overrides({}, list(items))


def test_an_integer_field_takes_a_number_that_is_exactly_an_integer():
    train = _sets("train.tokens=1e5", "train.seq_len=2.0", "train.batch_size=1_000")["train"]
    assert train == {"tokens": 100000, "seq_len": 2, "batch_size": 1000}
    assert all(type(v) is int for v in train.values())
    assert _sets("train.tokens=1e30")["train"]["tokens"] == 10**30  # exact, not int(1e30)'s rounding
    recipe = load_recipe(None, ["train.tokens=1e5"], GLA)
    assert recipe.train.tokens == 100000 and recipe.train.steps == 100000 // (8 * 256)


@pytest.mark.parametrize("item, message", [
    ("train.seq_len=12.5", "--set train.seq_len=12.5: train.seq_len is an integer; got 12.5"),
    ("train.tokens=abc", "--set train.tokens=abc: train.tokens is an integer; got abc"),
    ("train.lr=abc", "--set train.lr=abc: train.lr is a number; got abc"),
    ("train.compile=1", "train.compile is true or false; got 1"),
    ("score.mqar.lrs=[1e-3, abc]", "score.mqar.lrs is a list of numbers; got [1e-3, abc]"),
    ("score.mqar.steps=12.5", "--set score.mqar.steps=12.5: score.mqar.steps is an integer; got 12.5"),
    ("score.objectives=val_loss", "score.objectives is a list of strings; got val_loss"),
    ("score.lm_eval.limit=abc", "score.lm_eval.limit is an integer or null; got abc"),
    ("model.mixer_hparams=3", "model.mixer_hparams is a mapping; got 3"),
    ("train.lr.peak=1", "train.lr is a number and has no keys"),
])
def test_a_value_of_the_wrong_type_names_the_field_its_type_and_the_value(item, message):
    with pytest.raises(ConfigError) as e:
        _sets(item)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_numbers_and_strings_keep_their_field_types():
    d = _sets("train.lr=3e-4", "train.min_lr_ratio=1", "train.autocast=off", "data.source=2024", "train.compile=true")
    assert d["train"] == {"lr": 3e-4, "min_lr_ratio": 1.0, "autocast": "off", "compile": True}
    assert d["data"] == {"source": "2024"}  # the text as written, not YAML's int (or false for off)
    assert _sets("layout.ratio=6:1")["layout"] == {"ratio": "6:1"}


def test_list_fields_take_yaml_lists_and_check_each_element():
    score = _sets("score.mqar.lrs=[1e-3,5e-4]", "score.ruler.lengths=[1e3, 2048]", "score.objectives=[val_loss]")["score"]
    assert score == {"mqar": {"lrs": [1e-3, 5e-4]}, "ruler": {"lengths": [1000, 2048]}, "objectives": ["val_loss"]}
    assert type(score["ruler"]["lengths"][0]) is int
    assert _sets("layout.placement=[5, 11]")["layout"] == {"placement": [5, 11]}


def test_optional_fields_take_null():
    assert _sets("score.mqar.target=null", "score.ruler.cache_dir=null")["score"] == {"mqar": {"target": None},
                                                                                    "ruler": {"cache_dir": None}}
    assert _sets("model.n_kv_heads=null", "model.window=128")["model"] == {"n_kv_heads": None, "window": 128}
    with pytest.raises(ConfigError, match="train.seq_len is an integer; got null"):
        _sets("train.seq_len=null")


def test_nested_keys_reach_into_mapping_fields_and_keep_their_siblings():
    raw = {"model": {"d_model": 64, "mixer_hparams": {"gla": {"expand_v": 1}}}, "layout": "GGGGGA"}
    out = apply_overrides(raw, ["model.mixer_hparams.gla.num_heads=2", "score.ruler.qa_files.squad=qa/squad.json",
                                "layout.mixer=gla"])
    assert out["model"] == {"d_model": 64, "mixer_hparams": {"gla": {"expand_v": 1, "num_heads": 2}}}
    assert out["score"] == {"ruler": {"qa_files": {"squad": "qa/squad.json"}}}
    assert out["layout"] == {"mixer": "gla"}  # a layout string refined field by field
    assert raw["model"]["mixer_hparams"] == {"gla": {"expand_v": 1}}  # the input is not changed
    recipe = load_recipe(None, ["model.mixer_hparams.gla.num_heads=2"], GLA)
    assert recipe.model.mixer_hparams == {"gla": {"num_heads": 2}}


@pytest.mark.parametrize("item, message", [
    ("train.lrr=1", "--set train.lrr=1: unknown train key 'lrr'. Did you mean: lr? Allowed: autocast, batch_size,"),
    ("trian.lr=1", "--set trian.lr=1: unknown section 'trian'. Did you mean: train? Allowed: model, layout, train, data, score"),
    ("model.d_modl=64", "unknown model key 'd_modl'. Did you mean: d_model?"),
    ("layout.ration=3:1", "unknown layout key 'ration'. Did you mean: ratio? Allowed: layers, mixer, placement, ratio"),
    ("train.lr", "--set train.lr: write SECTION.KEY=VALUE with SECTION one of model, layout, train, data, score"),
])
def test_an_unknown_section_or_key_suggests_the_closest_and_lists_the_allowed(item, message):
    with pytest.raises(ConfigError) as e:
        _sets(item)
    assert message in str(e.value)


def test_search_sets_merge_over_the_space_sections():
    space = load_space("tiny")
    changed = space.with_sets(["train.tokens=2e4", "model.mixer_hparams.gla.num_heads=2", "score.mqar.target=null"])
    assert changed.train == dataclasses.replace(space.train, tokens=20000)
    assert changed.model.mixer_hparams == {**space.model.mixer_hparams, "gla": {"num_heads": 2}}
    assert changed.score.mqar == dataclasses.replace(space.score.mqar, target=None)
    assert changed.score.objectives == space.score.objectives and changed.data == space.data  # the rest kept
    assert space.with_sets([]) is space and space.train.tokens == 32768  # the original is not changed
    with pytest.raises(ConfigError, match="train.seq_len is an integer; got 12.5"):
        space.with_sets(["train.seq_len=12.5"])
    with pytest.raises(ConfigError, match="unknown section 'layout'"):
        space.with_sets(["layout.ratio=3:1"])


@pytest.mark.parametrize("argv", [["search"], ["calibrate", "tiny"]])
def test_search_and_calibrate_refuse_a_bad_set_before_any_run(argv, tmp_path, capsys):
    argv = [*argv, "--storage", f"sqlite:///{tmp_path}/s.db"]
    assert main([*argv, "--set", "train.tokens=abc", "--no-progress"]) == 2
    assert "--set train.tokens=abc: train.tokens is an integer; got abc" in capsys.readouterr().err
    assert not (tmp_path / "s.db").exists()


def test_train_with_a_float_token_count_end_to_end(tmp_path, capsys):
    out = tmp_path / "r"
    argv = ["train", "gla", "--ratio", "6:1", "--tokens", "4096", "--set", "train.tokens=1e4", "--set", "train.seq_len=32",
            "--set", "train.batch_size=2", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["status"] == "ok" and metrics["steps"] == 10000 // 64
    capsys.readouterr()
    assert main([*argv, "--set", "train.seq_len=12.5"]) == 2
    err = capsys.readouterr().err
    assert "--set train.seq_len=12.5: train.seq_len is an integer; got 12.5" in err and "Traceback" not in err


def test_config_files_are_read_with_the_same_types_as_overrides():
    """A recipe or space file goes through the same conversion as --set (hlnas.overrides.config_from_dict)."""
    from hlnas.errors import ConfigError
    from hlnas.pipeline.recipe import RunConfig
    from hlnas.lm.trainer import TrainConfig

    assert TrainConfig.from_dict({"tokens": 1e5, "seq_len": 64}).tokens == 100000
    with pytest.raises(ConfigError, match=r"train.seq_len is an integer; got 12.5"):
        TrainConfig.from_dict({"seq_len": 12.5})
    with pytest.raises(ConfigError, match=r"recipe: train.lr is a number; got 'abc'"):
        RunConfig.from_dict({"layout": "GGA", "train": {"lr": "abc"}})


def test_nested_config_keys_are_typed_by_their_section_s_field():
    assert _sets("score.mqar.steps=2e2", "score.lm_eval.limit=null")["score"] == {"mqar": {"steps": 200},
                                                                              "lm_eval": {"limit": None}}
    recipe = load_recipe(None, ["score.mqar.steps=200", "score.mqar.model.d_model=32", "score.ruler.lengths=[512]"], GLA)
    assert recipe.score.mqar.steps == 200 and recipe.score.mqar.model == {"d_model": 32}
    assert recipe.score.ruler.lengths == (512,)


@pytest.mark.parametrize("item, message", [
    ("score.mqar.stepz=1", "--set score.mqar.stepz=1: unknown score.mqar key 'stepz'. Did you mean: steps? "
                           "Allowed: batch, beta2, beyond, budget_s, compile, curriculum_frac, curriculum_kv, eval_every, graph, kernels,"),
    ("score.ruler.lenghts=[1]", "unknown score.ruler key 'lenghts'. Did you mean: lengths? Allowed: cache_dir, lengths,"),
    ("score.mqr.steps=1", "unknown score key 'mqr'. Did you mean: mqar? Allowed: batch_size, lm_eval, mqar, mqar_mixed,"),
    ("score.mqar=3", "--set score.mqar=3: score.mqar is a section; set its keys (score.mqar.KEY=VALUE), one of batch,"),
    ("score.mqar.steps.x=3", "score.mqar.steps is an integer and has no keys"),
])
def test_an_unknown_key_in_a_section_names_that_section_s_keys(item, message):
    with pytest.raises(ConfigError) as e:
        _sets(item)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_an_old_flat_set_is_read_as_its_new_key():
    assert _sets("score.mqar_steps=200")["score"] == _sets("score.mqar.steps=200")["score"] == {"mqar": {"steps": 200}}
    assert _sets("score.qa_files.qa_1=a.json")["score"] == {"ruler": {"qa_files": {"qa_1": "a.json"}}}
    with pytest.raises(ConfigError, match=r"--set score.mqar_steps=1.5: score.mqar.steps is an integer; got 1.5"):
        _sets("score.mqar_steps=1.5")
    # over a file written with old keys: its section is migrated first, so a new key overrides the old value
    old = {"score": {"objectives": ["mqar"], "mqar_steps": 100, "mqar_kv_pairs": 2, "ruler_lengths": [512]}}
    out = apply_overrides(old, ["score.mqar.steps=200"])
    assert out["score"] == {"objectives": ["mqar"], "mqar": {"steps": 200, "kv_pairs": 2}, "ruler": {"lengths": [512]}}
    assert old["score"]["mqar_steps"] == 100  # the input is not changed
    recipe = load_recipe(None, ["score.mqar_steps=300"], {**GLA, **old})
    assert recipe.score.mqar.steps == 300 and recipe.score.mqar.kv_pairs == 2
    with pytest.raises(ConfigError, match="score.mqar_steps and score.mqar.steps are the same setting"):
        apply_overrides({"score": {"mqar_steps": 1, "mqar": {"steps": 2}}}, ["score.mqar.lr=1e-3"])


def test_config_to_dict_writes_plain_json_types_and_the_configs_keep_their_output():
    import dataclasses

    from hlnas.model.config import PRESETS, ModelConfig
    from hlnas.data.sources import DataConfig
    from hlnas.overrides import config_from_dict, config_to_dict
    from hlnas.score.objectives import MqarConfig, ScoreConfig
    from hlnas.lm.trainer import TrainConfig

    for cfg in [*PRESETS.values(), ModelConfig(d_model=8, vocab_size=8, n_heads=2, mixer_hparams={"gla": {"num_heads": 2}}),
                TrainConfig(), TrainConfig(lr=3e-4, recall_format="mqar"), DataConfig(source="x.jsonl", seed=3)]:
        assert cfg.to_dict() == config_to_dict(cfg) == dataclasses.asdict(cfg)  # what they wrote before
        assert config_from_dict(type(cfg), cfg.to_dict(), "x") == cfg
    cfg = ScoreConfig(objectives=("mqar",), mqar=MqarConfig(lrs=(1e-3, 2e-3), model={"mixer_hparams": {"gla": {"a": (1,)}}}))
    d = config_to_dict(cfg)
    assert d["objectives"] == ["mqar"] and d["mqar"]["lrs"] == [1e-3, 2e-3] and isinstance(d["mqar"], dict)
    assert d["mqar"]["model"] == {"mixer_hparams": {"gla": {"a": [1]}}} and json.loads(json.dumps(d)) == d
    d["mqar"]["model"]["mixer_hparams"]["gla"]["a"].append(2)  # a copy all the way down
    assert cfg.mqar.model == {"mixer_hparams": {"gla": {"a": (1,)}}}
