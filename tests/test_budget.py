"""The cost model against reality: parameter counts against the built model, cache bytes against
the tensors a real decode holds, and the paper presets' parameter classes."""

from __future__ import annotations

import pytest
import torch

from hlnas.model.cost import layout_cost, resolve_config
from hlnas.model.catalog import MIXERS, PAPER_MIXERS, linear_mixer_names, mixer_entry
from hlnas.model.config import ModelConfig, preset
from hlnas.errors import ConfigError
from hlnas.model.layout import Layout, build_layout
from hlnas.model.build import build_model

TINY = preset("proxy-tiny")
LAYOUTS = [build_layout(m, "3:1", 6) for m in linear_mixer_names()] + [
    build_layout("transformer", None, 6),
    build_layout(["gla", "deltanet", "hgrn2", "mamba2", "retnet", "gated_deltanet"], placement=[2, 5]),
    # sliding-window layers (window 16, shorter than the 40 decoded tokens) as a hybrid's attention, beside full
    # attention, and alone
    build_layout("gated_deltanet", "3:1", 6, attention="swa:16"),
    Layout.parse("ZS16ZAS16A"),
    build_layout("swa:16", "pure", 3),
]


@pytest.mark.parametrize("layout", LAYOUTS, ids=str)
def test_params_match_the_built_model(layout):
    model = build_model(layout, TINY)
    assert layout_cost(layout, TINY).params == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("layout", LAYOUTS, ids=str)
def test_cache_bytes_after_decoding_match_prediction(layout, dtype):
    dt = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    model = build_model(layout, TINY).to(dt).eval()
    B, L = 2, 40
    ids = torch.randint(0, TINY.vocab_size, (B, L))
    cache = model.new_cache()
    with torch.no_grad():
        model(ids[:, :30], cache)
        for t in range(30, L):
            model(ids[:, t : t + 1], cache)
    cost = layout_cost(layout, TINY, context=L, batch=B, dtype=dtype)
    attn = sum(n for n, m in zip(cache.layer_nbytes(), layout.mixers) if mixer_entry(m).holds_kv)
    assert attn == cost.kv_cache_bytes
    assert cache.nbytes() - attn == cost.state_bytes
    assert cost.inference_bytes == cost.params * dt.itemsize + cost.kv_cache_bytes + cost.state_bytes


def test_sliding_window_caps_the_kv_cache():
    cfg = TINY.replace(window=16)
    layout = build_layout("transformer", None, 2)
    model = build_model(layout, cfg).eval()
    cache = model.new_cache()
    with torch.no_grad():
        model(torch.randint(0, 256, (1, 50)), cache)
    cost = layout_cost(layout, cfg, context=50, batch=1, dtype="fp32")
    assert cache.nbytes() == cost.kv_cache_bytes == 2 * 2 * TINY.kv_heads * TINY.head_dim * 16 * 4


def test_kv_formula_and_linear_state_is_constant_in_context():
    cfg = preset("paper-340m")
    t = build_layout("transformer", None)
    # 2 (K and V) x 16 kv heads x 64 head_dim x 4096 tokens x 24 layers x 2 bytes
    assert layout_cost(t, cfg).kv_cache_bytes == 2 * 16 * 64 * 4096 * 24 * 2
    for mixer in PAPER_MIXERS:
        pure = build_layout(mixer, "pure")
        a, b = layout_cost(pure, cfg, context=4096), layout_cost(pure, cfg, context=32768)
        assert a.kv_cache_bytes == b.kv_cache_bytes == 0 and a.state_bytes == b.state_bytes > 0
        assert a.flops_per_token == b.flops_per_token
    # the KV cache of r:1 hybrids is 1/r of the Transformer's
    for r in (3, 6, 12, 24):
        assert layout_cost(build_layout("gla", f"{r}:1"), cfg).kv_cache_bytes * r == layout_cost(t, cfg).kv_cache_bytes


def test_window_layers_bound_their_kv():
    """A swa:W layer holds min(L, W) tokens' keys and values at any context; full attention beside it grows."""
    cfg = preset("paper-340m")
    per_token = 2 * 16 * 64 * 2  # K and V x 16 kv heads x 64 head_dim x bf16
    swa = build_layout("gated_deltanet", "6:1", attention="swa:1024")
    for L in (512, 4096, 32768):
        assert layout_cost(swa, cfg, context=L).kv_cache_bytes == 4 * min(L, 1024) * per_token
    mixed = Layout.parse("ZZZZZS1024ZZZZZAZZZZZS1024ZZZZZA")
    assert layout_cost(mixed, cfg, context=4096).kv_cache_bytes == (2 * 1024 + 2 * 4096) * per_token
    assert layout_cost(build_layout("swa:1024", "pure"), cfg, context=4096).kv_cache_bytes == 24 * 1024 * per_token


def test_gqa_shrinks_kv():
    cfg = preset("paper-340m").replace(n_kv_heads=4)
    assert layout_cost(build_layout("transformer", None), cfg).kv_cache_bytes == 2 * 4 * 64 * 4096 * 24 * 2


@pytest.mark.parametrize("name, target", [("paper-340m", 340e6), ("paper-1.3b", 1.3e9)])
@pytest.mark.parametrize("mixer", ["transformer", *PAPER_MIXERS, "mamba2"])
def test_paper_presets_are_in_their_parameter_class(name, target, mixer):
    cfg = preset(name)
    layout = build_layout(mixer, None if mixer == "transformer" else "pure")
    params = layout_cost(layout, cfg).params
    assert abs(params - target) / target < 0.10, f"{mixer} at {name}: {params:,}"


def test_explicit_mlp_width_wins_over_target():
    cfg = preset("paper-340m").replace(mlp_hidden=2816)
    assert resolve_config(build_layout("gla", "6:1"), cfg).mlp_hidden == 2816


def test_target_too_small_is_a_clear_error():
    with pytest.raises(ConfigError, match="below what layout"):
        resolve_config(build_layout("gla", "6:1"), preset("paper-340m").replace(target_params=1000))


def test_flops_count_the_paper_mixer_terms():
    cfg = preset("paper-340m")
    t, g = build_layout("transformer", None), build_layout("gla", "pure")
    # attention's token-mixing term grows 2*L*d per layer
    assert layout_cost(t, cfg, context=8192).flops_per_token - layout_cost(t, cfg, context=4096).flops_per_token == 24 * 2 * 4096 * 1024
    assert layout_cost(g, cfg).flops_per_token < layout_cost(t, cfg, context=32768).flops_per_token


def test_bad_arguments():
    with pytest.raises(ConfigError, match="dtype 'int8' is not allowed; allowed: bf16"):
        layout_cost(LAYOUTS[0], TINY, dtype="int8")
    with pytest.raises(ConfigError, match="context and batch must be >= 1"):
        layout_cost(LAYOUTS[0], TINY, context=0)
    with pytest.raises(ConfigError, match="mixer_hparams\\['gla'\\]: unknown key 'heads'"):
        layout_cost(build_layout("gla", "3:1", 6), TINY.replace(mixer_hparams={"gla": {"heads": 2}}))
    with pytest.raises(ConfigError, match="divisible by n_heads"):
        ModelConfig(d_model=65, vocab_size=10, n_heads=4)
    assert set(MIXERS.names()) >= set(PAPER_MIXERS)
