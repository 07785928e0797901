"""One contract suite over every registered mixer: counts match the real module and cache,
decode matches the parallel forward, outputs are causal, gradients flow."""

from __future__ import annotations

import pytest
import torch

from hlnas.model.catalog import MIXERS, mixer_entry, split_layer
from hlnas.model.config import preset
from hlnas.model.cost import layer_mixer
from tests.helpers import assert_close

CFG = preset("proxy-tiny")
#: every mixer with its defaults (a windowed kind as a layer of window 8, shorter than the tests' sequences), plus
#: variants whose settings add modules or state: attention with its input conv, RWKV-7 past layer 0 (its value
#: residual's v_lora, lerping toward zeros alone: layer 0's v comes from the model, tests/test_rwkv7_model.py)
CASES = [*(f"{n}:8" if mixer_entry(n).windowed else n for n in MIXERS.names()), "attention+input_conv", "rwkv7@1"]
VARIANTS = {"attention+input_conv": {"input_conv": 4}}


def make(name: str, dtype=torch.float64):
    layer, _, idx = name.split("+")[0].partition("@")
    cls, hp = layer_mixer(layer, CFG.replace(mixer_hparams={split_layer(layer)[0]: VARIANTS.get(name, {})}))
    torch.manual_seed(0)
    m = cls(CFG.d_model, hp, layer_idx=int(idx or 0)).to(dtype)
    # re-randomize every parameter so zero-initialized gates cannot hide bugs
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    return cls, hp, m


@pytest.mark.parametrize("name", CASES)
def test_param_count_matches_module(name):
    cls, hp, m = make(name)
    assert cls.layer_param_count(CFG.d_model, hp, m.layer_idx) == sum(p.numel() for p in m.parameters())


@pytest.mark.parametrize("name", CASES)
def test_decode_matches_parallel(name):
    _, _, m = make(name)
    x = torch.randn(2, 37, CFG.d_model, dtype=torch.float64)
    full = m(x)
    cache: dict = {}
    parts = [m(x[:, :20], cache)]
    for t in range(20, 37):
        parts.append(m(x[:, t : t + 1], cache))
    assert_close(f"{name} decode", full, torch.cat(parts, 1), 1e-6)


@pytest.mark.parametrize("name", CASES)
def test_causal(name):
    _, _, m = make(name)
    x = torch.randn(1, 24, CFG.d_model, dtype=torch.float64)
    y = m(x)
    x2 = x.clone()
    x2[:, 12:] = torch.randn_like(x2[:, 12:])
    assert torch.allclose(m(x2)[:, :12], y[:, :12], atol=1e-10)


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_state_bytes_match_cache(name, dtype):
    cls, hp, m = make(name, dtype)
    B, T = 3, 29
    cache: dict = {}
    with torch.no_grad():
        m(torch.randn(B, T - 4, CFG.d_model, dtype=dtype), cache)
        for _ in range(4):
            m(torch.randn(B, 1, CFG.d_model, dtype=dtype), cache)
    held = sum(v.numel() * v.element_size() for v in cache.values() if isinstance(v, torch.Tensor))
    assert cls.state_bytes(CFG.d_model, hp, batch=B, seq_len=T, dtype=dtype) == held


@pytest.mark.parametrize("name", CASES)
def test_gradients_flow(name):
    _, _, m = make(name, torch.float32)
    x = torch.randn(2, 16, CFG.d_model, requires_grad=True)
    m(x).square().mean().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    for n, p in m.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), f"{n} got no finite gradient"


@pytest.mark.parametrize("name", CASES)
def test_flops_grow_only_for_attention(name):
    cls, hp, _ = make(name)
    f1, f2 = cls.flops_per_token(CFG.d_model, hp, 1024), cls.flops_per_token(CFG.d_model, hp, 4096)
    assert f1 > 0
    if name.startswith("attention"):
        assert f2 - f1 == 2 * 3072 * CFG.d_model
    else:
        assert f2 == f1


@pytest.mark.parametrize("name", CASES)
def test_fused_forms_equal_the_composed_ones(name, monkeypatch):
    """The forms CUDA runs (hlnas.model.nn.FUSED_ON_CPU: fused RMSNorm, one matmul over stacked projections, the lean gated
    norm) give each mixer's composed outputs and gradients, in float64."""
    import hlnas.model.nn

    _, _, m = make(name)
    x = torch.randn(2, 19, CFG.d_model, dtype=torch.float64, requires_grad=True)
    runs = []
    for fused in (False, True):
        monkeypatch.setattr(hlnas.model.nn, "FUSED_ON_CPU", fused)
        y = m(x)
        runs.append((y, *torch.autograd.grad(y.square().sum(), (x, *m.parameters()), allow_unused=True)))
    for i, (a, b) in enumerate(zip(*runs)):
        if a is None or b is None:
            assert a is None and b is None, f"{name}: gradient {i} exists in one form only"
            continue
        assert_close(f"{name} fused vs composed, output/gradient {i}", b, a, 1e-9)
