"""ScoreConfig: a section per objective, read from the nested form and from the old flat keys alike."""

from __future__ import annotations

import dataclasses
import json

import pytest

from hlnas.errors import ConfigError
from hlnas.score.objectives import (LEGACY_KEYS, OBJECTIVE_REGISTRY, OBJECTIVES, SECTIONS, LmEvalConfig, MqarConfig,
                                    ScoreConfig)

#: a value for every setting of every section, none of them its default
NESTED = {
    "objectives": ["val_loss", "ruler", "mqar", "lm_eval"],
    "batch_size": 4,
    "ruler": {"tasks": ["vt", "cwe"], "lengths": [512, 2048], "samples": 3, "seed": 7, "qa_files": {"qa_1": "squad.json"},
              "cache_dir": "/tmp/ruler-cache"},
    "mqar": {"seq_len": 32, "kv_pairs": 4, "vocab": 32, "steps": 9, "batch": 4, "lr": 2e-3, "test": 16, "test_seed": 3,
             "model": {"d_model": 32, "n_heads": 2}, "lrs": [1e-3, 5e-4], "target": 0.9, "eval_every": 3, "val": 8,
             "beta2": 0.95, "weight_decay": 0.05, "warmup_frac": 0.2, "graph": False, "budget_s": 60.0,
             "task": "vt", "vt": {"chains": 2, "hops": [1, 3], "query": "any", "curriculum_steps": 128, "curriculum": "staged"},
             "compile": "aot_eager", "kernels": "torch"},
    "mqar_mixed": {"scales": [1, 4]},
    "lm_eval": {"tasks": ["piqa"], "limit": 10, "include": "/tmp/tasks", "max_length": 512},
}


#: settings added after the flat form was retired: they have no old key (stored settings without them read as the default)
SINCE_NESTED = ("mqar.task", "mqar.vt", "mqar.compile", "mqar.kernels", "mqar.beyond", "mqar.curriculum_kv",
                "mqar.curriculum_frac", "mqar.overwrite")
#: MQAR-only settings: the example's task is VT, where they are refused (tests/score/test_recall_beyond.py sets them)
MQAR_ONLY = ("beyond", "curriculum_kv", "curriculum_frac", "overwrite")


def _flat(nested: dict) -> dict:
    """The same settings under the old flat keys, as stored studies and older space files have them."""
    flat = {k: v for k, v in nested.items() if k not in SECTIONS}
    for old, new in LEGACY_KEYS.items():
        section, key = new.split(".")
        flat[old] = nested[section][key]
    return flat


def _newer(nested: dict) -> dict:
    """The settings of :data:`SINCE_NESTED`, nested (they were never flat)."""
    out: dict = {}
    for dotted in SINCE_NESTED:
        section, key = dotted.split(".")
        if key in nested[section]:
            out.setdefault(section, {})[key] = nested[section][key]
    return out


def test_every_setting_of_the_example_differs_from_its_default():
    """Otherwise the flat/nested comparison below could pass with a key dropped on the way."""
    default = ScoreConfig().to_dict()
    for key in MQAR_ONLY:
        default["mqar"].pop(key)
    for section in SECTIONS:
        assert set(NESTED[section]) == set(default[section])
        for key, value in NESTED[section].items():
            assert value != default[section][key], f"{section}.{key}"


def test_an_old_flat_dict_and_its_nested_equivalent_build_equal_configs():
    flat = _flat(NESTED)
    assert not set(flat) & set(SECTIONS) and len(flat) == len(LEGACY_KEYS) + 2
    # settings that never had a flat key read back as their defaults from flat data (an old stored study: MQAR)
    assert ScoreConfig.from_dict(flat).mqar.task == "mqar"
    flat = {**flat, **_newer(NESTED)}  # and beside old flat keys, they are read nested
    from_flat, from_nested = ScoreConfig.from_dict(flat), ScoreConfig.from_dict(NESTED)
    assert from_flat == from_nested != ScoreConfig()
    defaults = ScoreConfig().to_dict()["mqar"]  # written back nested, whatever was read (the MQAR-only ones at defaults)
    assert from_flat.to_dict() == {**NESTED, "mqar": {**NESTED["mqar"], **{k: defaults[k] for k in MQAR_ONLY}}}
    assert from_flat.mqar.steps == 9 and from_flat.ruler.qa_files == {"qa_1": "squad.json"}
    assert from_flat.mqar_mixed.scales == (1, 4) and from_flat.lm_eval.max_length == 512
    # partly old, partly new (a file edited by hand) is the same config too
    mixed = {**{k: v for k, v in flat.items() if not k.startswith("mqar_") and k != "mqar"}, "mqar": NESTED["mqar"],
             "mqar_mixed_scales": [1, 4]}
    assert ScoreConfig.from_dict(mixed) == from_nested


def test_every_old_key_has_a_new_home_and_every_setting_an_old_key():
    new = sorted(LEGACY_KEYS.values())
    assert len(new) == len(set(new))  # no two old keys land on one setting
    every = [f"{s}.{f.name}" for s, cls in SECTIONS.items() for f in dataclasses.fields(cls)]
    assert new == sorted(k for k in every if k not in SINCE_NESTED) and set(SINCE_NESTED) <= set(every)


@pytest.mark.parametrize(("data", "message"), [
    ({"mqar_steps": 5, "mqar": {"steps": 6}},
     "score.mqar_steps and score.mqar.steps are the same setting (mqar_steps is its old name); give only score.mqar.steps"),
    ({"qa_files": {}, "ruler": {"qa_files": {"qa_1": "a"}}}, "score.qa_files and score.ruler.qa_files"),
    ({"mqar_mixed_scales": [1], "mqar_mixed": {"scales": [2]}}, "score.mqar_mixed_scales and score.mqar_mixed.scales"),
])
def test_a_setting_given_both_ways_is_refused_naming_both_keys(data, message):
    with pytest.raises(ConfigError) as e:
        ScoreConfig.from_dict(data)
    assert message in str(e.value)


@pytest.mark.parametrize(("data", "message"), [
    ({"mqar": {"steps": 0}}, "score.mqar.steps must be >= 1, got 0"),
    ({"mqar_steps": 0}, "score.mqar.steps must be >= 1, got 0"),
    ({"mqar": {"steps": 12.5}}, "score.mqar.steps is an integer; got 12.5"),
    ({"mqar_steps": 12.5}, "score.mqar.steps is an integer; got 12.5"),
    ({"ruler": {"lengths": []}}, "score.ruler.lengths must be positive token counts, got []"),
    ({"ruler": {"samples": 0}}, "score.ruler.samples must be >= 1, got 0"),
    ({"ruler": {"tasks": ["vtt"]}}, "unknown RULER task 'vtt'. Did you mean: vt?"),
    ({"lm_eval_max_length": 0}, "score.lm_eval.max_length must be >= 1, got 0"),
    ({"batch_size": 0}, "score.batch_size must be >= 1, got 0"),
    ({"mqar": {"stepz": 1}}, "unknown score.mqar key 'stepz'. Did you mean: steps? Allowed: batch, beta2, beyond, budget_s,"),
    ({"mqar": 3}, "score.mqar must be a mapping of its settings, got 3"),
    ({"objectives": ["mqarr"]}, f"unknown objective 'mqarr'. Did you mean: mqar? Allowed: {', '.join(OBJECTIVES)}"),
])
def test_bad_settings_are_named_by_their_dotted_key(data, message):
    with pytest.raises(ConfigError) as e:
        ScoreConfig.from_dict(data)
    assert message in str(e.value)


def test_the_sections_are_the_registry_s():
    assert OBJECTIVES == tuple(OBJECTIVE_REGISTRY) and "val_loss" not in SECTIONS  # val_loss has no settings
    assert SECTIONS == {"ruler": OBJECTIVE_REGISTRY["ruler"].section, "mqar": MqarConfig,
                        "mqar_mixed": OBJECTIVE_REGISTRY["mqar_mixed"].section, "lm_eval": LmEvalConfig}
    d = ScoreConfig().to_dict()
    assert list(d) == ["objectives", "batch_size", *SECTIONS] and json.loads(json.dumps(d)) == d
    with pytest.raises(ConfigError, match="score.mqar must be a MqarConfig"):
        ScoreConfig(mqar={"steps": 5})


def test_a_config_round_trips_through_its_dict_and_keeps_its_types():
    cfg = ScoreConfig.from_dict(NESTED)
    assert ScoreConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.mqar.lrs == (1e-3, 5e-4) and cfg.ruler.lengths == (512, 2048)  # tuples inside, lists in the dict
    d = cfg.to_dict()
    d["mqar"]["model"]["d_model"] = 64  # the dict is a copy
    assert cfg.mqar.model == {"d_model": 32, "n_heads": 2}


def test_a_recipe_written_with_flat_keys_runs_the_same_recipe():
    """Recipe files (hlnas train --config) written before the sections carry flat score keys; they read as the nested ones."""
    from hlnas.pipeline.recipe import RunConfig

    old = RunConfig.from_dict({"layout": "GGA", "score": {**_flat(NESTED), **_newer(NESTED)}})
    new = RunConfig.from_dict({"layout": "GGA", "score": NESTED})
    assert old == new and old.score.mqar.steps == 9
