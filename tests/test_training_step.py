"""hlnas.training.step.snapshot/rewind: the LM trainer's CUDA-graph capture trains warm-up steps on its first batch and
then puts model and optimizer back, so its first real step is the one an eager run takes (run here on CPU, where
the same warm-up can be replayed by hand)."""

from __future__ import annotations

import torch

from hlnas.model.config import preset
from hlnas.training.step import make_optimizer, rewind, snapshot
from hlnas.model.layout import Layout
from hlnas.model.build import seeded_model
from hlnas.lm.trainer import TrainConfig, lm_loss


def _step(model, opt, x, y):
    lm_loss(model(x), y).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)


def _batch(seed: int):
    g = torch.Generator().manual_seed(seed)
    t = torch.randint(0, 256, (2, 17), generator=g)
    return t[:, :-1], t[:, 1:]


def test_rewind_after_warm_up_steps_gives_the_fresh_first_step():
    layout, cfg = Layout.parse("AGA"), preset("proxy-tiny")
    fresh = seeded_model(layout, cfg, 0)
    fresh_opt = make_optimizer(fresh, 1e-3, graph=False)
    _step(fresh, fresh_opt, *_batch(1))

    warmed = seeded_model(layout, cfg, 0)
    opt = make_optimizer(warmed, 1e-3, graph=False)
    saved = snapshot(warmed, opt)  # a fresh optimizer: no state yet
    for _ in range(3):  # what capture does before recording
        _step(warmed, opt, *_batch(0))
    assert not torch.equal(warmed.lm_head.weight, fresh.lm_head.weight)
    rewind(warmed, opt, saved)
    _step(warmed, opt, *_batch(1))
    for (name, a), b in zip(warmed.state_dict().items(), fresh.state_dict().values()):
        assert torch.equal(a, b), name
    st_a = opt.state[next(iter(warmed.parameters()))]
    st_b = fresh_opt.state[next(iter(fresh.parameters()))]
    assert float(st_a["step"]) == float(st_b["step"]) == 1.0 and torch.equal(st_a["exp_avg"], st_b["exp_avg"])


def test_rewind_restores_a_loaded_optimizer_state():
    model = seeded_model(Layout.parse("AA"), preset("proxy-tiny"), 0)
    opt = make_optimizer(model, 1e-3, graph=False)
    _step(model, opt, *_batch(0))  # a resumed run: state exists
    saved = snapshot(model, opt)
    before = {k: v.clone() for k, v in opt.state[model.lm_head.weight].items()}
    _step(model, opt, *_batch(2))
    rewind(model, opt, saved)
    for k, v in opt.state[model.lm_head.weight].items():
        assert torch.equal(v, before[k]), k


def test_a_checkpoint_from_before_the_graph_setting_still_resumes():
    cfg = TrainConfig(tokens=4096)
    old = {k: v for k, v in cfg.to_dict().items() if k != "graph"}  # what older checkpoints stored
    assert TrainConfig.from_dict(old) == cfg
