"""The PyTorch paths inside a bf16 autocast region, as the trainer runs models on CUDA.

On the H200 these paths are the fallback for several fla kernels (RetNet's and Mamba-2's gated backward,
GatedDeltaNet's backward), and under the trainer's autocast they broke: simple_gla's in-place baddbmm got a
bf16 left side and float32 operands, and the delta rule's triangular_solve has no bf16 kernel. Autocast on
CPU recasts the same matmuls, so these tests show the same fault here; the fix keeps each path in the
float32 it chose and returns the input's dtype."""

from __future__ import annotations

import importlib

import pytest
import torch

from hlnas.model.config import ModelConfig
from hlnas.model.kernels import use_backend
from hlnas.model.layout import Layout, build_layout
from hlnas.model.build import build_model
from tests.helpers import rel_err
from tests.kernels.inputs import make_inputs

OPS = {  # op -> (function, the make_inputs keys it takes positionally)
    "hgrn": ("chunk_hgrn_torch", ("x", "g")),
    "simple_gla": ("chunk_simple_gla_torch", ("q", "k", "v", "g")),
    "gla": ("chunk_gla_torch", ("q", "k", "v", "g")),
    "delta_rule": ("chunk_delta_rule_torch", ("q", "k", "v", "beta")),
    "gated_delta_rule": ("chunk_gated_delta_rule_torch", ("q", "k", "v", "g", "beta")),
    "kda": ("chunk_kda_torch", ("q", "k", "v", "g", "beta")),
    "rwkv7": ("chunk_rwkv7_torch", ("r", "w", "k", "v", "a", "b")),
}


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("path", ["chunk", "naive"])
def test_torch_paths_keep_float32_under_a_bf16_autocast(op, path):
    mod = importlib.import_module(f"hlnas.model.kernels.{op}")
    name, keys = OPS[op]
    fn = getattr(mod, name if path == "chunk" else f"naive_{op}")
    inp = make_inputs(op, 1, 96, 2, 16, 16)
    args = [inp[k].requires_grad_() for k in keys]
    o_ref, _ = fn(*args)
    g_ref = torch.autograd.grad(o_ref.square().sum(), args)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        o, _ = fn(*args)
    g = torch.autograd.grad(o.square().sum(), args)  # backward outside the region, as the trainer does
    assert o.dtype == torch.float32  # the input's dtype, not autocast's
    assert rel_err(o_ref, o) < 1e-6
    errs = [rel_err(b, a) for a, b in zip(g, g_ref, strict=True)]
    assert max(errs) < 1e-5, errs


@pytest.mark.parametrize("mixer", ["retnet", "deltanet", "gated_deltanet", "mamba2", "hgrn2", "hgrn", "gla", "kda", "rwkv7"])
def test_a_model_trains_on_the_torch_paths_under_bf16_autocast(mixer):
    torch.manual_seed(0)
    model = build_model(Layout.parse(str(build_layout(mixer, "pure", 1)) + "A"),
                        ModelConfig(d_model=64, n_layers=2, vocab_size=64, n_heads=2))
    ids = torch.randint(0, 64, (2, 80))
    with use_backend("torch"), torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(ids)
    loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), ids.roll(-1, 1).flatten())
    loss.backward()
    assert torch.isfinite(loss)
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters() if p.requires_grad)
