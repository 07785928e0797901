"""Which fla kernel (or the PyTorch fallback) each op picks, checked on CPU with fla's kernels replaced by spies.

These routes exist because of failures seen on the H200 (experiments/results/gpu_check_h200.md): fla's
chunk_hgrn drops the final state's gradient, fla's chunk_simple_gla faulted at small head dims, and the
gated backward is wrong on Hopper with triton < 3.7.1 (fla #640)."""

from __future__ import annotations

import logging

import pytest
import torch

import hlnas.model.kernels.backends as backends
import hlnas.model.kernels.hgrn as hgrn_mod
import hlnas.model.kernels.simple_gla as sg_mod
from tests.kernels.inputs import make_inputs

fla_hgrn = pytest.importorskip("fla.ops.hgrn")


@pytest.fixture
def as_if_cuda(monkeypatch):
    """Every op resolves to the fla backend, as on a GPU machine; fallback warnings not yet given."""
    monkeypatch.setattr(backends, "_logged", set())
    monkeypatch.setattr(backends, "resolve_backend", lambda *a, **k: "fla")


def _spy(monkeypatch, module, name, calls):
    def fake(x, g, initial_state=None, output_final_state=False):
        calls.append(name)
        return hgrn_mod.chunk_hgrn_torch(x, g, initial_state=initial_state, output_final_state=output_final_state)
    monkeypatch.setattr(module, name, fake)


@pytest.mark.parametrize("final_state,expect", [(False, "chunk_hgrn"), (True, "fused_recurrent_hgrn")])
def test_hgrn_takes_the_recurrent_kernel_when_the_final_state_has_a_gradient(as_if_cuda, monkeypatch, final_state, expect):
    calls: list = []
    _spy(monkeypatch, fla_hgrn, "chunk_hgrn", calls)
    _spy(monkeypatch, fla_hgrn, "fused_recurrent_hgrn", calls)
    inp = make_inputs('hgrn', 1, 100, 2, 8, 8)
    x, g = (t.requires_grad_() for t in (inp["x"], inp["g"]))
    hgrn_mod.hgrn(x, g, output_final_state=final_state)
    assert calls == [expect]
    calls.clear()
    with torch.no_grad():  # no gradient anywhere: the chunk kernel is fine for a long prefill
        hgrn_mod.hgrn(x, g, output_final_state=True)
    assert calls == ["chunk_hgrn"]


def test_simple_gla_with_small_heads_keeps_to_pytorch(as_if_cuda, caplog):
    inp = make_inputs('simple_gla', 1, 70, 2, 32, 32, decay="g_gamma")
    with caplog.at_level(logging.WARNING, logger="hlnas.model.kernels"):
        o, _ = sg_mod.simple_gla(**inp)  # would import and launch fla's kernel if it did not fall back
    ref, _ = sg_mod.simple_gla(**inp, backend="torch")
    assert torch.equal(o, ref)
    assert "key head dim 32 < 64 faulted in fla's kernel on Hopper" in caplog.text


def test_simple_gla_gated_backward_falls_back_where_fla_is_wrong(as_if_cuda, monkeypatch, caplog):
    monkeypatch.setattr(backends, "fla_gated_backward_ok", lambda: (False, "Hopper with triton 3.6.0 (fla #640)"))
    inp = {k: v.requires_grad_() for k, v in make_inputs('simple_gla', 1, 70, 2, 64, 64, decay="g").items()}
    with caplog.at_level(logging.WARNING, logger="hlnas.model.kernels"):
        o, _ = sg_mod.simple_gla(**inp)
    ref, _ = sg_mod.simple_gla(**inp, backend="torch")
    assert torch.equal(o, ref)
    assert "simple_gla: using the PyTorch kernel (forward and backward) instead of fla: Hopper" in caplog.text
