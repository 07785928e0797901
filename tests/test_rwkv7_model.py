"""RWKV-7 and KDA inside a model: RWKV-7's value residual hands layer 0's v to later layers within one forward (and
only within it), decode equals the parallel forward across layers, and the new mixers train a step."""

from __future__ import annotations

import torch

from hlnas.model.build import build_model
from hlnas.model.config import preset
from hlnas.model.layout import Layout
from tests.helpers import assert_close

TINY = preset("proxy-tiny")


def _model(layout: str):
    torch.manual_seed(0)
    model = build_model(Layout.parse(layout), TINY).double()
    with torch.no_grad():  # off the init, where the LoRAs start at their biases
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    return model


def test_later_layers_read_layer_zeros_value():
    model = _model("WWAW")
    seen = []
    later = model.blocks[1].mixer
    forward = type(later).forward

    def spy(self, x, cache=None):
        seen.append(self.shared.get("v_first") if self.shared is not None else None)
        return forward(self, x, cache)

    later.forward = spy.__get__(later)
    ids = torch.randint(0, TINY.vocab_size, (2, 12))
    model(ids)
    (v_first,) = seen
    assert v_first is not None and v_first.shape == (2, 12, TINY.d_model)
    assert model._shared == {}  # emptied after the forward: no activation outlives it
    assert all(b.mixer.shared is model._shared for b in model.blocks if hasattr(b.mixer, "shared"))


def test_the_value_residual_changes_the_output():
    """Cutting the hand-off (later layers lerping toward zeros) changes the logits: the residual is live."""
    model = _model("WWW")
    ids = torch.randint(0, TINY.vocab_size, (1, 10))
    with torch.no_grad():
        y = model(ids)
        model.blocks[0].mixer.shared = None  # layer 0 no longer hands its v on
        y_cut = model(ids)
    assert not torch.allclose(y, y_cut)


def test_decode_matches_parallel_across_layers():
    for layout in ("WWAW", "KWKA", "AWWK"):  # with layer 0 attention, later RWKV-7 layers lerp toward zeros (fla's)
        model = _model(layout).eval()
        ids = torch.randint(0, TINY.vocab_size, (2, 21))
        with torch.no_grad():
            full = model(ids)
            cache = model.new_cache()
            parts = [model(ids[:, :13], cache)] + [model(ids[:, t : t + 1], cache) for t in range(13, 21)]
        assert_close(f"{layout} decode", full, torch.cat(parts, 1), 1e-9)


def test_a_training_step_moves_every_new_mixer():
    torch.manual_seed(0)
    model = build_model(Layout.parse("KWAK"), TINY)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, TINY.vocab_size, (2, 33))
    losses = []
    for _ in range(3):
        logits = model(ids[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(map(torch.isfinite, map(torch.tensor, losses))) and losses[-1] < losses[0]
