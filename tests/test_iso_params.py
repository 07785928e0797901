"""The iso-parameter solve (``ModelConfig.target_params``): every mixer at every ratio lands within
:data:`hlnas.model.cost.ISO_TOLERANCE` of the target by its MLP width, the cost model's count is the built model's,
a trial records the target beside what it got (the recall model never takes the solve: tests/score/test_recall_proxy.py)."""

from __future__ import annotations

import pytest

from hlnas.errors import ConfigError
from hlnas.model.build import build_model
from hlnas.model.catalog import linear_mixer_names
from hlnas.model.config import ModelConfig, preset
from hlnas.model.cost import ISO_TOLERANCE, layout_cost, layout_metrics, resolve_config
from hlnas.model.layout import PAPER_RATIOS, build_layout

LAYOUTS = [build_layout("transformer", None, 24)] + [build_layout(m, r, 24) for m in linear_mixer_names() for r in PAPER_RATIOS]
SCALES = {
    # the real-text grid's proxy: d=256, a BPE vocabulary of 8192 (search_spaces/paper_grid_lm_english.yaml)
    "proxy-256": ModelConfig(d_model=256, vocab_size=8192, n_heads=4, target_params=24_000_000),
    # byte-level at the size, where RetNet ran 25-27M and the rest 21-22M before the solve held
    "bytes-256": ModelConfig(d_model=256, vocab_size=256, n_heads=4, target_params=21_000_000),
    "paper-340m": preset("paper-340m"),
    "paper-1.3b": preset("paper-1.3b"),
}


@pytest.mark.parametrize("scale", list(SCALES))
def test_every_mixer_at_every_ratio_lands_within_tolerance(scale):
    cfg = SCALES[scale]
    off = {str(lay): (layout_cost(lay, cfg).params - cfg.target_params) / cfg.target_params for lay in LAYOUTS}
    assert len(off) == 1 + len(linear_mixer_names()) * len(PAPER_RATIOS)
    worst = max(off, key=lambda k: abs(off[k]))
    assert abs(off[worst]) <= ISO_TOLERANCE, f"{worst} is {off[worst]:+.2%} off {cfg.target_params:,}"


def test_the_solve_is_what_the_built_model_has():
    cfg = ModelConfig(d_model=32, vocab_size=512, n_heads=2, target_params=400_000)
    for mixer in linear_mixer_names():
        lay = build_layout(mixer, "3:1", 6)
        model = build_model(lay, cfg)
        assert model.num_params() == layout_cost(lay, cfg).params
        assert abs(model.num_params() - cfg.target_params) <= ISO_TOLERANCE * cfg.target_params, mixer


def test_the_solve_prefers_a_coarse_width_and_refines_only_when_it_must():
    cfg = SCALES["proxy-256"]
    widths = {str(lay): resolve_config(lay, cfg).mlp_hidden for lay in LAYOUTS}
    assert all(w % 8 == 0 for w in widths.values())
    # the paper's scale keeps fla-like tile multiples
    big = {resolve_config(lay, preset("paper-340m")).mlp_hidden % 32 for lay in LAYOUTS}
    assert big == {0}


def test_a_target_no_width_can_reach_is_a_clear_error():
    cfg = ModelConfig(d_model=256, vocab_size=8192, n_heads=4, target_params=5_000_000)
    with pytest.raises(ConfigError, match="below what layout .* needs without an MLP"):
        resolve_config(build_layout("retnet", "pure", 24), cfg)


def test_a_trial_records_the_target_beside_the_params_it_got():
    cfg = SCALES["proxy-256"]
    m = layout_metrics("RRRRRA" * 4, cfg, 4096)
    assert m["target_params"] == 24_000_000 and m["mlp_hidden"] == resolve_config(build_layout("retnet", "6:1", 24), cfg).mlp_hidden
    assert abs(m["params"] - m["target_params"]) <= ISO_TOLERANCE * m["target_params"]
    plain = layout_metrics("RRRRRA" * 4, cfg.replace(target_params=None), 4096)
    assert plain["target_params"] is None and plain["mlp_hidden"] == cfg.mlp_width



def test_every_lm_candidate_of_the_real_text_space_has_the_spaces_size():
    from hlnas.space import load_space

    space = load_space("paper_grid_lm_english")
    target = space.model.target_params
    assert target and len(space.candidates()) == 31
    for lay in space.candidates():
        got = layout_metrics(str(lay), space.model, space.kv_context)
        assert got["target_params"] == target
        assert abs(got["params"] - target) <= ISO_TOLERANCE * target, f"{lay}: {got['params']:,}"
