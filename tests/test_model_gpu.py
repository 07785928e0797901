"""Whole models on the GPU: every mixer wired to fla's kernels gives what the PyTorch path gives.

The op tests (tests/kernels) check each kernel alone; these check the wiring around them (gate dtypes,
head reshapes, short convolutions, initial states, the decode path) inside a real HybridLM. Run on the
H200 through experiments/paper_grid/h200.sh (``pytest -m gpu``); skipped on CPU machines."""

from __future__ import annotations

import pytest
import torch

from hlnas.model.catalog import linear_mixer_names
from hlnas.model.config import ModelConfig
from hlnas.model.kernels import use_backend
from hlnas.model.layout import Layout, build_layout
from hlnas.model.build import build_model
from tests.helpers import rel_err

pytestmark = pytest.mark.gpu

CFG = ModelConfig(d_model=128, n_layers=2, vocab_size=256, n_heads=2)
TOL = 2e-2


def _run(model, ids, backend: str, bf16: bool):
    model.zero_grad(set_to_none=True)
    with use_backend(backend), torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
        logits = model(ids)
    loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), ids.roll(-1, 1).flatten())
    loss.backward()
    return logits.float().detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def _model(mixer):
    torch.manual_seed(0)
    model = build_model(Layout.parse(str(build_layout(mixer, "pure", 1)) + "A"), CFG).cuda()  # the mixer, then attention
    return model, torch.randint(0, 256, (2, 256), device="cuda")


@pytest.mark.parametrize("bf16", [False, True], ids=["float32", "bf16_autocast"])
@pytest.mark.parametrize("mixer", linear_mixer_names())
def test_fla_model_matches_the_pytorch_model(mixer, bf16):
    """Both paths at the same precision, parameter by parameter, so what differs is the sequence kernel alone.

    float32 checks the wiring (gate dtypes, head reshapes, short convolutions, states): the paths differ by
    accumulation order (and TF32 dots) only. bf16 autocast is what training runs; the PyTorch kernels keep
    float32 inside it. Against a float32 model, bf16 autocast itself moves HGRN-2's forget-gate projection
    gradient by 5.9e-2 on either path (a near-cancelling sum through k = 1 - f and g = log f), while fla's
    kernel adds 5.8e-3 to the whole gradient (experiments/results/gpu_model_precision_h200.md, H200, 2026-11-30)."""
    model, ids = _model(mixer)
    ref_logits, ref_grads = _run(model, ids, "torch", bf16=bf16)
    logits, grads = _run(model, ids, "fla", bf16=bf16)
    assert rel_err(ref_logits, logits) < TOL
    assert set(grads) == set(ref_grads)
    errs = {n: rel_err(ref_grads[n], grads[n]) for n in grads}
    worst = max(errs, key=errs.get)
    print(f"{mixer} {'bf16' if bf16 else 'fp32'}: logits {rel_err(ref_logits, logits):.1e}, worst gradient {worst} {errs[worst]:.1e}")
    if not bf16:
        assert errs[worst] < TOL, f"{mixer}: gradient of {worst} off by {errs[worst]:.2e}"
        return
    # In bf16 a gradient that is one sum over every token can differ beyond TOL by rounding alone: Mamba-2's D was
    # 2.4e-2 apart on an H100 (2026-12-06) once the short conv ran on fla's fused conv + silu, which rounds in other
    # places than conv1d then silu. Such a gradient must then be no further from the float32 model than the PyTorch
    # path's is (1.5x for the noise in two bf16 errors): a wiring fault moves a gradient by O(1), rounding does not.
    _, exact = _run(model, ids, "torch", bf16=False)
    for name in (n for n in errs if errs[n] >= TOL):
        fla_off, torch_off = rel_err(exact[name], grads[name]), rel_err(exact[name], ref_grads[name])
        print(f"  {name}: from the float32 model, fla {fla_off:.1e}, PyTorch {torch_off:.1e}")
        assert fla_off <= max(TOL, 1.5 * torch_off), (
            f"{mixer}: gradient of {name} off by {errs[name]:.2e} from the PyTorch path and {fla_off:.2e} from the "
            f"float32 model, where the PyTorch path is {torch_off:.2e} from it")


@pytest.mark.parametrize("mixer", linear_mixer_names())
def test_cached_decoding_on_the_gpu_matches_the_parallel_forward(mixer):
    torch.manual_seed(0)
    layout = Layout.parse(str(build_layout(mixer, "pure", 1)) + "A")
    model = build_model(layout, CFG).cuda().eval()
    ids = torch.randint(0, 256, (2, 80), device="cuda")
    with torch.no_grad(), use_backend("fla"):
        full = model(ids)
        cache = model.new_cache()
        parts = [model(ids[:, :64], cache)] + [model(ids[:, t : t + 1], cache) for t in range(64, 80)]
    assert rel_err(full, torch.cat(parts, 1)) < 1e-3  # fp32 throughout: chunked prefill + recurrent steps
