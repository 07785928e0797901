"""Replicas of one layout trained as one model (hlnas.training.replicas, replica_step; issue #21): on CPU in float32,
two replicas trained N steps as one model give each one's solo loss curve and final weights, for every mixer."""

from __future__ import annotations

import os

import pytest
import torch
from torch import nn

from hlnas.model.config import ModelConfig
from hlnas.errors import ConfigError
from hlnas.model.layout import Layout
from hlnas.model.build import seeded_model
from hlnas.recall.mqar import MqarTask, make_mqar, mqar_loss
from hlnas.recall.proxy import mqar_train_batches
from hlnas.training.loop import cosine_lr
from hlnas.training.replica_step import ReplicaAdamW, per_replica
from hlnas.training.replicas import ReplicaError, ReplicatedShortConvolution, replicate
from hlnas.training.step import make_optimizer, make_step, set_lr

# the replicated model's gradients are strided views on purpose (hlnas.training.replicas filters this outside pytest)
pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.filterwarnings("ignore:grad and param do not obey")]

CODES = {"attention": "A", "gla": "G", "hgrn": "H", "hgrn2": "N", "retnet": "R", "deltanet": "D",
         "gated_deltanet": "Z", "mamba2": "M"}
# the recall proxy's settings: short convolutions everywhere, attention's input conv
HP = {"attention": {"input_conv": 4}, "gla": {"use_short_conv": True}, "hgrn": {"use_short_conv": True},
      "hgrn2": {"use_short_conv": True}}
TASK = MqarTask(vocab_size=32, seq_len=16, num_kv_pairs=2)
BATCH, STEPS, WD, BETAS = 4, 6, 0.1, (0.9, 0.98)


def _setup(mixer: str, **cfg):
    c = CODES[mixer]
    # the mixer at layer 0 and layer 2 (HGRN/HGRN-2 lower bounds differ by depth), attention between
    layout = Layout.parse(f"{c}A{c}")
    return layout, ModelConfig(**{"d_model": 32, "n_layers": 3, "vocab_size": 32, "n_heads": 2, "mixer_hparams": HP, **cfg})


def _lr(step: int, peak: float) -> float:
    return cosine_lr(step, STEPS, peak, 0.1, 0.0)


def solo_run(layout, cfg, seed: int, lr: float, steps: int = STEPS):
    """The solo recall step: make_optimizer's AdamW (foreach on CPU), make_step's global clip at 1.0."""
    model = seeded_model(layout, cfg, seed)
    opt = make_optimizer(model, lr, betas=BETAS, weight_decay=WD, graph=False)
    batches = mqar_train_batches(TASK, BATCH, seed)
    step, _ = make_step(model, opt, mqar_loss, next(mqar_train_batches(TASK, BATCH, seed)), graph=False)
    losses = []
    for i in range(steps):
        set_lr(opt, _lr(i, lr))
        losses.append(float(step(*next(batches))))
    return losses, model


def replica_run(layout, cfg, seeds, lrs, steps: int = STEPS):
    rep = replicate([seeded_model(layout, cfg, s) for s in seeds])
    opt = ReplicaAdamW(rep, lrs, betas=BETAS, weight_decay=WD)
    streams = [mqar_train_batches(TASK, BATCH, s) for s in seeds]
    example = tuple(torch.cat(t) for t in zip(*(next(mqar_train_batches(TASK, BATCH, s)) for s in seeds)))
    step, _ = make_step(rep, opt, per_replica(mqar_loss, len(seeds)), example, graph=False)
    curves = []
    for i in range(steps):
        opt.set_lrs([_lr(i, lr) for lr in lrs])
        x, y = (torch.cat(t) for t in zip(*(next(s) for s in streams)))
        curves.append(step(x, y).tolist())
    return [list(c) for c in zip(*curves)], rep, opt


def assert_same_run(solo_losses, solo_model, rep_losses, rep, r, what):
    # measured: losses within 5e-7, weights mostly within 6e-7 after 6 steps (float32 rounding of the batched
    # matmuls); Adam's m/sqrt(v) magnifies the rounding of a near-zero gradient (a zero-initialised model's first
    # ones): up to 5e-6 on one element, 0.2% of a step at lr 3e-3. The solo runs use torch's fused AdamW on CPU (its
    # own order of operations): up to 1.1e-5 on one element of 8192, 0.4% of a step; on another CPU of the same kind
    # (2026-12-03, torch 2.13.0) 3.04e-5 on one element of HGRN's down_proj, 1% of a step. A wrong gradient, rate or
    # decay moves weights by a whole step (1e-3..3e-3): 1e-4 keeps a 10x margin to that
    assert rep_losses == pytest.approx(solo_losses, rel=1e-6, abs=2e-6), what
    state = rep.replica_state(r)
    for k, p in solo_model.named_parameters():
        torch.testing.assert_close(state[k], p.detach(), rtol=1e-5, atol=1e-4, msg=lambda m: f"{what} {k}: {m}")


@pytest.mark.parametrize("mixer", list(CODES))
def test_two_replicas_train_as_their_solo_runs(mixer):
    layout, cfg = _setup(mixer)
    runs = [(1, 3e-3), (2, 1e-3)]  # different seeds (weights and data) and different learning rates
    losses, rep, _ = replica_run(layout, cfg, [s for s, _ in runs], [lr for _, lr in runs])
    for r, (seed, lr) in enumerate(runs):
        solo_losses, solo_model = solo_run(layout, cfg, seed, lr)
        assert_same_run(solo_losses, solo_model, losses[r], rep, r, f"{mixer} replica {r} (seed {seed}, lr {lr})")


def test_every_parameter_starts_on_a_slot_boundary_and_one_head_delta_rules_train_as_solo():
    """GatedDeltaNet with one head has 1-element parameters (A_log, dt_bias): packed tight, every view after them
    began 4 bytes off and the compiled replicated step met a misaligned address on the H100 (2026-12-06). Each
    parameter and its gradient now start on a SLOT_BYTES boundary; the padding counts as no parameter and trains as
    nothing (the replicas still equal their solo runs)."""
    from hlnas.training.replicas import SLOT_BYTES

    layout, cfg = _setup("gated_deltanet", mixer_hparams={**HP, "gated_deltanet": {"num_heads": 1, "head_dim": 16}})
    solo = seeded_model(layout, cfg, 1)
    assert any(p.numel() == 1 for p in solo.parameters())  # the case that broke
    runs = [(1, 3e-3), (2, 1e-3)]
    losses, rep, _ = replica_run(layout, cfg, [s for s, _ in runs], [lr for _, lr in runs])
    assert rep.num_params() == sum(p.numel() for p in solo.parameters()) < rep.flat.shape[1]
    for k in rep.names:
        for t in (rep.stacked[k], rep.stacked[k].grad):
            assert t.data_ptr() % SLOT_BYTES == 0 and t.stride(0) * t.element_size() % SLOT_BYTES == 0, k
    gaps = torch.ones(rep.flat.shape[1], dtype=torch.bool)
    for lo, hi in zip(rep.offsets, rep.ends):
        gaps[lo:hi] = False
    assert gaps.any() and not rep.flat[:, gaps].any() and not rep.flat_grad[:, gaps].any()
    for r, (seed, lr) in enumerate(runs):
        solo_losses, solo_model = solo_run(layout, cfg, seed, lr)
        assert_same_run(solo_losses, solo_model, losses[r], rep, r, f"one-head gated_deltanet replica {r}")


@pytest.mark.parametrize("start", ["shift", "shift2", "split2"])
def test_shift_started_attention_conv_replicas_train_as_their_solo_runs(start):
    # issue #20's protocols: the attention-input conv started as a shift (or split2), zero residual outputs
    hp = {**HP, "attention": {"input_conv": 4, "input_conv_init": start}}
    layout, cfg = _setup("gla", mixer_hparams=hp, residual_init="zero")
    losses, rep, _ = replica_run(layout, cfg, [0, 1], [1e-3, 1e-3])
    for r in (0, 1):
        solo_losses, solo_model = solo_run(layout, cfg, r, 1e-3)
        assert solo_model.blocks[1].mixer.input_conv.weight.shape[-1] == 4
        assert_same_run(solo_losses, solo_model, losses[r], rep, r, f"{start} replica {r}")


def test_same_seed_two_learning_rates_and_tied_zero_init_model():
    """The calibration's other pairing (one seed, two rates) on the recall proxy's init (zeroed residual outputs)
    with a tied LM head (one table per replica, shared by the head)."""
    layout, cfg = _setup("gla", residual_init="zero", tie_embeddings=True)
    runs = [(5, 3e-3), (5, 1e-3)]
    losses, rep, _ = replica_run(layout, cfg, [s for s, _ in runs], [lr for _, lr in runs])
    assert rep.inner.lm_head.weight is rep.inner.embed.weight
    for r, (seed, lr) in enumerate(runs):
        solo_losses, solo_model = solo_run(layout, cfg, seed, lr)
        assert_same_run(solo_losses, solo_model, losses[r], rep, r, f"tied replica {r}")
    assert losses[0] != losses[1]


def test_replica_adamw_is_torch_adamw_for_one_replica():
    """R=1: the same parameters, decay groups and moments as torch.optim.AdamW over steps with changing rates."""
    layout, cfg = _setup("gated_deltanet")  # A_log/dt_bias: the no-decay group beside norms and matrices
    ref = seeded_model(layout, cfg, 3)
    rep = replicate([seeded_model(layout, cfg, 3)])
    torch_opt = make_optimizer(ref, 1e-2, betas=BETAS, weight_decay=WD, graph=False)
    opt = ReplicaAdamW(rep, [1e-2], betas=BETAS, weight_decay=WD)
    gen = torch.Generator().manual_seed(0)
    for i in range(5):
        grads = {k: torch.randn(p.shape, generator=gen) * 10 ** -(i % 3) for k, p in ref.named_parameters()}
        for k, p in ref.named_parameters():
            p.grad = grads[k].clone()
            rep.stacked[k].grad[0].copy_(grads[k])
        set_lr(torch_opt, 1e-2 / (i + 1))
        opt.set_lrs([1e-2 / (i + 1)])
        torch_opt.step()
        opt.step()
    state = rep.replica_state(0)
    for k, p in ref.named_parameters():
        torch.testing.assert_close(state[k], p.detach(), rtol=1e-6, atol=1e-7, msg=lambda m: f"{k}: {m}")
    assert not any(rep.decays[rep.offsets[i]:rep.offsets[i + 1]].any()
                   for i, k in enumerate(rep.names) if k.endswith(("A_log", "dt_bias", "weight")) and "norm" in k)


def test_a_frozen_replica_stays_and_its_slot_takes_a_fresh_run():
    """Replica 0 stops after 2 steps: frozen, then slot 0 restarts with seed 7 at its own step 0 and trains as a solo
    seed-7 run, while replica 1 goes on as its solo run."""
    layout, cfg = _setup("hgrn")
    rep = replicate([seeded_model(layout, cfg, s) for s in (1, 2)])
    opt = ReplicaAdamW(rep, [3e-3, 1e-3], betas=BETAS, weight_decay=WD)
    streams = [mqar_train_batches(TASK, BATCH, 1), mqar_train_batches(TASK, BATCH, 2)]
    example = tuple(torch.cat(t) for t in zip(next(mqar_train_batches(TASK, BATCH, 1)), next(mqar_train_batches(TASK, BATCH, 1))))
    step, _ = make_step(rep, opt, per_replica(mqar_loss, 2), example, graph=False)
    runs, steps, curves = [(1, 3e-3), (2, 1e-3)], [0, 0], [[], []]

    def one():
        opt.set_lrs([_lr(steps[r], runs[r][1]) for r in range(2)])
        x, y = (torch.cat(t) for t in zip(*(next(s) for s in streams)))
        loss = step(x, y).tolist()
        for r in range(2):
            if bool(opt.active[r]):
                curves[r].append(loss[r])
                steps[r] += 1

    for _ in range(2):
        one()
    opt.freeze(0)
    frozen = rep.replica_state(0)["blocks.0.mixer.i_proj.weight"].clone()
    one()
    assert torch.equal(rep.replica_state(0)["blocks.0.mixer.i_proj.weight"], frozen)
    runs[0], steps[0], curves[0] = (7, 2e-3), 0, []
    opt.restart(0, seeded_model(layout, cfg, 7))
    streams[0] = mqar_train_batches(TASK, BATCH, 7)
    for _ in range(STEPS - 3):  # replica 1 to its STEPS, the fresh run in slot 0 to STEPS - 3
        one()
    fresh_losses, fresh_model = solo_run(layout, cfg, 7, 2e-3, steps=STEPS - 3)
    assert_same_run(fresh_losses, fresh_model, curves[0], rep, 0, "restarted slot")
    solo_losses, solo_model = solo_run(layout, cfg, 2, 1e-3)
    assert_same_run(solo_losses, solo_model, curves[1], rep, 1, "the replica beside it")


def test_short_convolution_conv1d_path_matches_the_multiply_adds(monkeypatch):
    """Off CPU the replicas are folded into the channels of one grouped conv1d: same outputs and gradients."""
    layout, cfg = _setup("deltanet")
    rep = replicate([seeded_model(layout, cfg, s) for s in (1, 2, 3)])
    ids = torch.randint(0, 32, (6, 16), generator=torch.Generator().manual_seed(0))
    out = rep(ids)
    out.square().mean().backward()
    grad = rep.flat_grad.clone()
    rep.flat_grad.zero_()
    monkeypatch.setattr(ReplicatedShortConvolution, "use_conv1d", True)
    out2 = rep(ids)
    out2.square().mean().backward()
    torch.testing.assert_close(out2, out, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(rep.flat_grad, grad, rtol=1e-4, atol=1e-7)


def test_under_torch_compile_the_replicas_conv_is_the_multiply_adds_off_cpu_too(monkeypatch):
    """The conv1d path (off CPU) is what compile would call as an extern kernel; traced by torch.compile the replicas
    take the shifted multiply-adds instead, with the same outputs and gradients."""
    from tests.kernels.test_causal_conv1d import _traced_ops

    layout, cfg = _setup("deltanet")
    rep = replicate([seeded_model(layout, cfg, s) for s in (1, 2)])
    conv = next(m for m in rep.modules() if isinstance(m, ReplicatedShortConvolution))
    monkeypatch.setattr(ReplicatedShortConvolution, "use_conv1d", True)
    x = torch.randn(4, 16, conv.channels, generator=torch.Generator().manual_seed(0), requires_grad=True)
    want = conv(x)
    want_grads = torch.autograd.grad(want.square().sum(), (x, conv.weight))
    got, ops = _traced_ops(conv, x)
    assert not any("conv1d" in o for o in ops), ops
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for a, b in zip(torch.autograd.grad(got.square().sum(), (x, conv.weight)), want_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_a_module_without_a_replicated_form_is_refused_by_name():
    layout, cfg = _setup("gla")
    models = [seeded_model(layout, cfg, s) for s in (1, 2)]
    for m in models:
        m.blocks[1].extra = nn.LayerNorm(32)
    with pytest.raises(ReplicaError, match=r"blocks\.1\.extra \(LayerNorm\)"):
        replicate(models)
    models = [seeded_model(layout, cfg, s) for s in (1, 2)]
    for m in models:
        m.blocks[0].mixer.temperature = nn.Parameter(torch.ones(4))
    with pytest.raises(ReplicaError, match="mixer 'gla'.*temperature"):
        replicate(models)
    with pytest.raises(ReplicaError, match="not of model 0's layout"):
        replicate([seeded_model(layout, cfg, 1), seeded_model(Layout.parse("GAA"), cfg, 1)])


def test_train_mqar_replicas_gives_each_run_its_solo_proxy_result():
    """Three runs (seed, rate) in two slots: the third starts in the slot the first frees; each run's curve, steps and
    weights are the solo proxy's (recall_proxy._one_rate) for its seed and rate, early stop at the target included."""
    from hlnas.recall.proxy import MqarConfig, _one_rate, recall_setup
    from hlnas.recall.replicas import train_mqar_replicas

    base = ModelConfig(d_model=32, n_layers=3, vocab_size=32, n_heads=2)
    cfg = MqarConfig(seq_len=16, kv_pairs=2, vocab=32, batch=4, steps=10, eval_every=2, val=16, test=16, target=0.09,
                     model={"residual_init": "zero", "mixer_hparams": HP})
    layout, runs = Layout.parse("GAH"), [(1, 3e-3), (2, 1e-2), (3, 1e-3)]
    got = train_mqar_replicas(layout, base, cfg, runs, slots=2, device="cpu")
    setup = recall_setup(layout, base, cfg)
    mcfg = TASK.replace(vocab_size=cfg.vocab, seq_len=cfg.seq_len, num_kv_pairs=cfg.kv_pairs)
    stops = []
    for (seed, lr), g in zip(runs, got):
        val = make_mqar(mcfg, cfg.val, (2**31 - 1 - seed) % 2**31, split="train")
        solo = _one_rate(setup, lr, seed, torch.device("cpu"), val)
        assert (g["seed"], g["lr"], g["steps"], g["error"], g["mode"]) == (seed, lr, solo["steps"], None, "eager")
        assert [c[:2] for c in g["curve"]] == [c[:2] for c in solo["curve"]]
        assert [c[0] for c in g["clock"]] == [c[0] for c in solo["clock"]] == [c[0] for c in solo["curve"]]
        assert [c[2] for c in g["curve"]] == pytest.approx([c[2] for c in solo["curve"]], abs=2e-4)
        # Adam's m/sqrt(v) magnifies the rounding of near-zero gradients: within 0.5% of one step of size lr
        for k, p in solo["model"].named_parameters():
            torch.testing.assert_close(dict(g["model"].named_parameters())[k], p, rtol=1e-5, atol=5e-3 * lr)
        stops.append(g["steps"])
    assert stops == [10, 2, 10]  # seed 2 reaches the target at its first check; seed 3 then starts in its slot


# one 32-wide GatedDeltaNet head: its 1-element A_log and dt_bias once left every later parameter of the replicas' flat
# storage 4 bytes off, and the first gradient zeroing died of "misaligned address" on the H100 (2026-12-06)
ONE_HEAD_GDN = {**HP, "gated_deltanet": {"num_heads": 1, "head_dim": 32, "expand_v": 4.0}}


@pytest.mark.gpu
@pytest.mark.parametrize("layout, hparams", [("AAAA", HP), ("GZAH", HP), ("ZZAZ", ONE_HEAD_GDN)],
                         ids=["control", "mixed", "one_head_gated_deltanet"])
def test_replicas_on_the_cuda_graph_step_give_the_solo_graph_runs(layout, hparams):
    """On CUDA (bf16 autocast, fla kernels, one captured graph per step): two runs as replicas give their solo graph
    runs' steps and curves within bf16 tolerance (accuracies within one validation instance's share)."""
    from hlnas.recall.proxy import MqarConfig, _one_rate, recall_setup
    from hlnas.recall.replicas import train_mqar_replicas

    base = ModelConfig(d_model=64, n_layers=4, vocab_size=64, n_heads=2)
    cfg = MqarConfig(seq_len=64, kv_pairs=4, vocab=64, batch=16, steps=40, eval_every=10, val=64, test=64,
                     model={"residual_init": "zero", "mixer_hparams": hparams})
    runs = [(1, 3e-3), (2, 1e-3)]
    got = train_mqar_replicas(Layout.parse(layout), base, cfg, runs, device="cuda")
    setup = recall_setup(Layout.parse(layout), base, cfg)
    mcfg = MqarTask(vocab_size=cfg.vocab, seq_len=cfg.seq_len, num_kv_pairs=cfg.kv_pairs)
    for (seed, lr), g in zip(runs, got):
        val = make_mqar(mcfg, cfg.val, (2**31 - 1 - seed) % 2**31, split="train")
        solo = _one_rate(setup, lr, seed, torch.device("cuda"), val)
        assert g["mode"] == solo["mode"] == "graph" and g["steps"] == solo["steps"]
        assert [c[0] for c in g["curve"]] == [c[0] for c in solo["curve"]]
        assert [c[2] for c in g["curve"]] == pytest.approx([c[2] for c in solo["curve"]], rel=0.02)
        assert [c[1] for c in g["curve"]] == pytest.approx([c[1] for c in solo["curve"]], abs=0.05)


# -- a calibration's seeds as replicas: train_mqar's result per seed, paused and continued ------------------------------
SEEDS_CFG = dict(seq_len=16, kv_pairs=2, vocab=32, batch=4, steps=10, eval_every=2, val=16, test=16, target=0.09,
                 lrs=(3e-3, 1e-2), model={"residual_init": "zero", "mixer_hparams": HP})


def assert_same_recall(got: dict, solo: dict, what: str) -> None:
    """One seed's train_mqar result against another's: the same keys, scores, kept rate, and per-rate curves (losses
    within float32 rounding of the batched matmuls). A replica's result also says how many runs trained with it."""
    assert set(got) - {"mqar_replicas"} == set(solo) - {"mqar_replicas"}, what
    assert isinstance(got.get("mqar_replicas", 1), int) and got.get("mqar_replicas", 1) >= 1, what
    for k in ("mqar_acc", "mqar_lr", "mqar_steps_done", "mqar_auc", "mqar_steps_to_target", "mqar_baseline",
              "mqar_val_baseline", "mqar_baselines", "mqar_budget", "mqar_finished"):
        assert got.get(k) == solo.get(k), f"{what}: {k}"
    assert got["mqar_final_loss"] == pytest.approx(solo["mqar_final_loss"], abs=2e-4), what
    assert len(got["mqar"]["runs"]) == len(solo["mqar"]["runs"]), what
    for g, s in zip(got["mqar"]["runs"], solo["mqar"]["runs"]):
        assert set(g) == set(s), what
        for k in ("lr", "steps", "finished", "error", "steps_to_target", "auc", "val_acc", "mode"):
            assert g[k] == s[k], f"{what}: run {k}"
        assert [c[:2] for c in g["curve"]] == [c[:2] for c in s["curve"]], what
        assert [c[2] for c in g["curve"]] == pytest.approx([c[2] for c in s["curve"]], abs=2e-4), what


def test_train_mqar_seeds_gives_each_seed_its_train_mqar_result_over_a_rate_sweep():
    """Three seeds, two rates, target 0.09: seed 2 reaches it at rate 1 (no second rate), seed 3 only at rate 2, seed 1
    never (both rates to the full steps); each seed's result is train_mqar's, the sweep's stop rule included."""
    from hlnas.recall.proxy import MqarConfig, train_mqar
    from hlnas.recall.replicas import train_mqar_seeds

    base = ModelConfig(d_model=32, n_layers=3, vocab_size=32, n_heads=2)
    cfg, layout, seeds = MqarConfig(**SEEDS_CFG), Layout.parse("GAH"), [1, 2, 3]
    got = train_mqar_seeds(layout, base, cfg, seeds, device="cpu")
    assert [[(r["lr"], r["steps"]) for r in g["mqar"]["runs"]] for g in got] == [
        [(3e-3, 10), (1e-2, 10)], [(3e-3, 6)], [(3e-3, 10), (1e-2, 4)]]
    for seed, g in zip(seeds, got):
        assert_same_recall(g, train_mqar(layout, base, cfg, seed=seed, device="cpu"), f"seed {seed}")
    with pytest.raises(ConfigError, match=r"each seed once, got \[1, 1\]"):
        train_mqar_seeds(layout, base, cfg, [1, 1], device="cpu")


def test_replicas_paused_mid_run_and_continued_give_the_uninterrupted_runs(tmp_path):
    """Interrupted twice (at a step budget of 4, then by the clock at the next check) in fewer slots than seeds, then
    continued: each seed's curves, steps, kept rate and scores are its uninterrupted solo run's; the paused calls say
    they are unfinished, and the continued run's wall time counts the paused parts."""
    import time

    from hlnas.recall.proxy import MqarConfig, paused_at, train_mqar
    from hlnas.recall.replicas import train_mqar_replicas, train_mqar_seeds

    base = ModelConfig(d_model=32, n_layers=3, vocab_size=32, n_heads=2)
    cfg, layout, seeds = MqarConfig(**SEEDS_CFG), Layout.parse("GAH"), [1, 2, 3]
    with paused_at(str(tmp_path), 4):
        first = train_mqar_seeds(layout, base, cfg, seeds, slots=2, device="cpu")
    assert all(not f["mqar_finished"] and f["mqar_budget"] == 4 for f in first)
    assert [[r["steps"] for r in f["mqar"]["runs"]] for f in first] == [[4, 4], [4, 2], [4, 4]]  # each rate to the rung (seed 2's second reached the target at 2)
    with paused_at(str(tmp_path), None, until=time.time()):
        second = train_mqar_seeds(layout, base, cfg, seeds, slots=1, device="cpu")
    # the clock paused rate 1 at its next check (step 6), and rate 2 waits for it; seed 2 reached the target there
    assert [[r["steps"] for r in s["mqar"]["runs"]] for s in second] == [[6], [6], [6]]
    assert [s["mqar_finished"] for s in second] == [False, True, False]
    with paused_at(str(tmp_path), None):
        last = train_mqar_seeds(layout, base, cfg, seeds, device="cpu")
    for seed, f, got in zip(seeds, first, last):
        solo = train_mqar(layout, base, cfg, seed=seed, device="cpu")
        assert_same_recall({k: v for k, v in got.items() if k not in ("mqar_budget", "mqar_finished")}, solo, f"seed {seed}")
        assert got["mqar_finished"] and got["mqar"]["runs"][0]["wall_s"] >= f["mqar"]["runs"][0]["wall_s"]

    # the plain replicas API pauses the same way: a run per file, continued as one straight run
    runs = [(1, 3e-3), (3, 1e-3)]
    straight = train_mqar_replicas(layout, base, cfg, runs, device="cpu")
    with paused_at(str(tmp_path / "plain"), 4):
        part = train_mqar_replicas(layout, base, cfg, runs, slots=1, device="cpu")
    with paused_at(str(tmp_path / "plain"), None):
        whole = train_mqar_replicas(layout, base, cfg, runs, device="cpu")
    assert [p["steps"] for p in part] == [4, 4] and not any(p["finished"] for p in part)
    assert sorted(os.listdir(tmp_path / "plain")) == ["mqar_replica0.pt", "mqar_replica1.pt"]
    for s, w in zip(straight, whole):
        assert (w["steps"], w["finished"], [c[:2] for c in w["curve"]]) == (s["steps"], s["finished"], [c[:2] for c in s["curve"]])
        for k, p in s["model"].named_parameters():
            torch.testing.assert_close(dict(w["model"].named_parameters())[k], p, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("curriculum", [0, 64])
def test_train_mqar_seeds_on_vt_gives_each_seed_its_train_mqar_result(curriculum):
    """The replicas train whatever task the space's recall proxy trains (score.mqar.task): on multi-hop variable
    tracking too, each seed's result is its solo train_mqar's, baselines included; with VT's curriculum too (64: the
    whole run on 0-hop chains, which the replicas must take as the solo run does)."""
    from hlnas.recall.proxy import MqarConfig, train_mqar
    from hlnas.recall.replicas import train_mqar_seeds

    base = ModelConfig(d_model=32, n_layers=3, vocab_size=32, n_heads=2)
    cfg = MqarConfig(**{**SEEDS_CFG, "task": "vt", "vt": {"chains": 2, "hops": [0, 1], "curriculum_steps": curriculum},
                        "seq_len": 20})
    layout, seeds = Layout.parse("GAH"), [1, 2]
    got = train_mqar_seeds(layout, base, cfg, seeds, device="cpu")
    for seed, g in zip(seeds, got):
        assert g["mqar"]["task"] == "vt" and g["mqar_baseline"] == pytest.approx(0.5)  # 1 / chains
        assert_same_recall(g, train_mqar(layout, base, cfg, seed=seed, device="cpu"), f"vt seed {seed}")
