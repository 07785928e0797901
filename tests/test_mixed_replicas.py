"""Replicas of different layouts as one model (hlnas.training.mixed_replicas; issues #21, #20 point 7): on CPU in
float32 each replica trains as its solo run of its own layout, a freed slot takes a run of another layout, and what
cannot be mixed is refused by name."""

from __future__ import annotations

import pytest
import torch

from hlnas.model.config import ModelConfig
from hlnas.model.layout import Layout
from hlnas.model.build import seeded_model
from hlnas.recall.mqar import mqar_loss
from hlnas.recall.proxy import mqar_train_batches
from hlnas.training.mixed_replicas import RoutedMixer, replicate_mixed
from hlnas.training.replica_step import ReplicaAdamW, per_replica
from hlnas.training.replicas import ReplicaError
from hlnas.training.step import make_step
from tests.test_replicas import BATCH, BETAS, HP, STEPS, TASK, WD, _lr, assert_same_run, solo_run

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.filterwarnings("ignore:grad and param do not obey")]

CFG = ModelConfig(d_model=32, n_layers=4, vocab_size=32, n_heads=2, mixer_hparams=HP, residual_init="zero")


def mixed_run(runs, takes=(), steps: int = STEPS, static: bool = False):
    """``runs`` (layout, seed, lr) as one mixed replicated model, ``steps`` steps of the solo schedule."""
    rep = replicate_mixed([seeded_model(lay, CFG, s) for lay, s, _ in runs], takes, static=static)
    opt = ReplicaAdamW(rep, [lr for *_, lr in runs], betas=BETAS, weight_decay=WD)
    streams = [mqar_train_batches(TASK, BATCH, s) for _, s, _ in runs]
    example = tuple(torch.cat(t) for t in zip(*(next(mqar_train_batches(TASK, BATCH, s)) for _, s, _ in runs)))
    step, _ = make_step(rep, opt, per_replica(mqar_loss, len(runs)), example, graph=False)
    curves = []
    for i in range(steps):
        opt.set_lrs([_lr(i, lr) for *_, lr in runs])
        x, y = (torch.cat(t) for t in zip(*(next(s) for s in streams)))
        curves.append(step(x, y).tolist())
    return [list(c) for c in zip(*curves)], rep, opt


@pytest.mark.parametrize("family", ["G", "H", "N", "R", "D", "Z", "M"])
def test_a_family_of_layouts_trains_as_its_solo_runs(family):
    """A mixer pure, with attention at the back and at the front, and an all-attention control, seeds and rates
    differing: each replica's losses and weights are its solo run's (its own layout's)."""
    m = family
    runs = [(Layout.parse(m * 4), 1, 3e-3), (Layout.parse(f"{m}{m}{m}A"), 2, 1e-3), (Layout.parse(f"A{m}{m}{m}"), 3, 3e-3),
            (Layout.parse("AAAA"), 4, 2e-3)]
    losses, rep, _ = mixed_run(runs)
    assert [len(k) for k in rep.kinds] == [2, 2, 2, 2]  # every layer holds both kinds
    for r, (lay, seed, lr) in enumerate(runs):
        solo_losses, solo_model = solo_run(lay, CFG, seed, lr)
        assert_same_run(solo_losses, solo_model, losses[r], rep, r, f"{lay} replica {r}")


def test_each_row_takes_its_own_kind_and_other_kinds_get_no_gradient():
    """The routing itself: a layer's rows of a replica are exactly its kind's output (not a mix), and in a replica
    the weights of a kind it does not use get exactly zero gradient."""
    runs = [(Layout.parse("GGGG"), 1, 1e-3), (Layout.parse("GGGA"), 2, 1e-3)]
    solo = [seeded_model(lay, CFG, s) for lay, s, _ in runs]
    rep = replicate_mixed(solo)
    router = rep.routers[3]
    assert isinstance(router, RoutedMixer) and router.kinds == ["attention", "gla"] and router.route.tolist() == [1, 0]
    x = torch.randn(2 * 3, 8, 32)
    rep.fold.batch = 3
    with torch.no_grad():
        got = router(x)
        want = torch.cat([solo[0].blocks[3].mixer(x[:3]), solo[1].blocks[3].mixer(x[3:])])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)  # batched matmuls' rounding, not another kind's output
    ids = torch.randint(0, 32, (2 * 3, 8))
    rep(ids).square().sum().backward()
    def grads(kind):  # [R]: whether any weight of the kind at layer 3 has a gradient, per replica
        g = [p.grad.flatten(1) for n, p in rep.stacked.items() if n.startswith(f"blocks.3.mixer.mixers.{kind}.")]
        return torch.cat(g, 1).ne(0).any(1).tolist()

    assert grads("attention") == [False, True]  # replica 0 (pure) never uses attention at layer 3
    assert grads("gla") == [True, False]


def test_a_freed_slot_takes_a_run_of_another_layout():
    """A slot that trained GGGA restarts with a GAGG run (a layout given in ``takes``): from then on it trains as
    that run's solo model; reading it back gives that run's weights under its own names."""
    first, nxt = (Layout.parse("GGGA"), 2, 1e-3), (Layout.parse("GAGG"), 5, 3e-3)
    rep = replicate_mixed([seeded_model(first[0], CFG, first[1]), seeded_model(Layout.parse("GGGG"), CFG, 1)],
                          [nxt[0]])
    fresh = seeded_model(nxt[0], CFG, nxt[1])
    opt = ReplicaAdamW(rep, [1e-3, 1e-3], betas=BETAS, weight_decay=WD)
    opt.restart(0, fresh)
    assert rep.slot_layouts[0] == nxt[0] and [m.route[0].item() for m in rep.routers] == [0, 0, 0, 1]
    state = rep.replica_state(0)
    assert set(state) == {n for n, _ in fresh.named_parameters()}
    for n, p in fresh.named_parameters():
        torch.testing.assert_close(state[n], p.detach(), rtol=0, atol=0)
    streams = [mqar_train_batches(TASK, BATCH, s) for s in (nxt[1], 1)]
    example = tuple(torch.cat(t) for t in zip(*(next(mqar_train_batches(TASK, BATCH, s)) for s in (nxt[1], 1))))
    step, _ = make_step(rep, opt, per_replica(mqar_loss, 2), example, graph=False)
    losses = []
    for i in range(STEPS):
        opt.set_lrs([_lr(i, nxt[2]), _lr(i, 1e-3)])
        x, y = (torch.cat(t) for t in zip(*(next(s) for s in streams)))
        losses.append(float(step(x, y)[0]))
    solo_losses, solo_model = solo_run(nxt[0], CFG, nxt[1], nxt[2])
    assert_same_run(solo_losses, solo_model, losses, rep, 0, "GAGG in GGGA's slot")
    back = rep.to_solo(0, seeded_model(nxt[0], CFG, 9))
    for (n, p), (_, q) in zip(back.named_parameters(), solo_model.named_parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-4, msg=lambda m: f"{n}: {m}")


def test_what_cannot_be_mixed_is_refused_by_name():
    a, b = seeded_model(Layout.parse("GGGA"), CFG, 1), seeded_model(Layout.parse("GGA"), CFG.replace(n_layers=3), 1)
    with pytest.raises(ReplicaError, match=r"one depth only, got depths \[3, 4\]"):
        replicate_mixed([a, b])
    wide = seeded_model(Layout.parse("GGGG"), CFG.replace(mlp_hidden=64), 1)
    with pytest.raises(ReplicaError, match="differ in their config"):
        replicate_mixed([a, wide])
    rep = replicate_mixed([a])
    opt = ReplicaAdamW(rep, [1e-3])
    with pytest.raises(ReplicaError, match=r"takes layouts GGGA; got HGGA"):
        opt.restart(0, seeded_model(Layout.parse("HGGA"), CFG, 1))
    with pytest.raises(ReplicaError, match="slot 0 trains GGGA, not GGGG"):
        rep.to_solo(0, seeded_model(Layout.parse("GGGG"), CFG, 1))


def test_train_mqar_layouts_gives_each_layout_and_seed_its_train_mqar_result(tmp_path):
    """Three layouts of GLA (pure, attention last, attention first) x 2 seeds over a rate sweep in 4 slots (freed
    slots take runs of other layouts), paused at a step budget and continued: each (layout, seed) gets the result
    train_mqar gives it alone, the sweep's stop rule included."""
    from hlnas.recall.proxy import MqarConfig, paused_at, train_mqar
    from hlnas.recall.replicas import train_mqar_layouts
    from tests.test_replicas import SEEDS_CFG, assert_same_recall

    base = ModelConfig(d_model=32, n_layers=3, vocab_size=32, n_heads=2)
    cfg = MqarConfig(**SEEDS_CFG)
    units = [(Layout.parse("GGG"), [1, 2]), (Layout.parse("GGA"), [2, 3]), (Layout.parse("AGG"), [1, 3])]
    with paused_at(str(tmp_path), 4):
        part = train_mqar_layouts(units, base, cfg, slots=4, device="cpu")
    # 4 of 6 paused at the budget (two reached the target at step 2); a file per layout, seed and rate
    assert [[r["mqar_finished"] for r in u] for u in part] == [[False, False], [False, True], [False, True]]
    assert (tmp_path / "mqar_GGA_seed2_rate1.pt").exists() and (tmp_path / "mqar_AGG_seed1_rate0.pt").exists()
    with paused_at(str(tmp_path), None):
        got = train_mqar_layouts(units, base, cfg, slots=4, device="cpu")
    fresh = train_mqar_layouts(units, base, cfg, slots=4, device="cpu")
    for (lay, seeds), g_unit, f_unit in zip(units, got, fresh):
        for s, g, f in zip(seeds, g_unit, f_unit):
            solo = train_mqar(lay, base, cfg, seed=s, device="cpu")
            assert_same_recall({k: v for k, v in g.items() if k not in ("mqar_budget", "mqar_finished")}, solo,
                               f"{lay} seed {s} continued")
            assert_same_recall(f, solo, f"{lay} seed {s}")
            assert f["mqar_replicas"] == 6  # the runs trained together: collect.py shares mqar_s among them
    with pytest.raises(Exception, match="each layout once"):
        train_mqar_layouts([units[0], units[0]], base, cfg, device="cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("ranges", [True, False], ids=["ranges", "where"])
@pytest.mark.parametrize("compile", [False, True], ids=["eager", "compiled"])
def test_mixed_replicas_on_the_cuda_graph_step_give_the_solo_graph_runs(compile, ranges, monkeypatch):
    """On CUDA (bf16 autocast, fla kernels, one captured graph per step; compiled blocks too): GLA pure, attention
    last and attention first as one mixed model give each run's solo graph run within bf16 tolerance, with each
    kind on its own replicas' rows (ranges) or on every row (where)."""
    import hlnas.recall.replicas as rr
    from hlnas.recall.mqar import MqarTask, make_mqar
    from hlnas.recall.proxy import MqarConfig, _one_rate, recall_setup
    from hlnas.recall.replicas import train_mqar_layouts

    monkeypatch.setattr(rr, "MIXED_RANGES", ranges)

    base = ModelConfig(d_model=64, n_layers=4, vocab_size=64, n_heads=2)
    cfg = MqarConfig(seq_len=64, kv_pairs=4, vocab=64, batch=16, steps=40, eval_every=10, val=64, test=64, lr=1e-3,
                     compile=compile, model={"residual_init": "zero", "mixer_hparams": HP})
    units = [(Layout.parse("GGGG"), [1]), (Layout.parse("GGGA"), [2]), (Layout.parse("AGGA"), [3])]
    got = train_mqar_layouts(units, base, cfg, device="cuda")
    mcfg = MqarTask(vocab_size=cfg.vocab, seq_len=cfg.seq_len, num_kv_pairs=cfg.kv_pairs)
    for (lay, (seed,)), (g,) in zip(units, got):
        run = g["mqar"]["runs"][0]
        val = make_mqar(mcfg, cfg.val, (2**31 - 1 - seed) % 2**31, split="train")
        solo = _one_rate(recall_setup(lay, base, cfg), cfg.lr, seed, torch.device("cuda"), val)
        assert run["mode"] == solo["mode"] == "graph" and run["steps"] == solo["steps"], lay
        assert [c[2] for c in run["curve"]] == pytest.approx([c[2] for c in solo["curve"]], rel=0.02), lay
        assert [c[1] for c in run["curve"]] == pytest.approx([c[1] for c in solo["curve"]], abs=0.05), lay


def test_a_paused_mixed_run_continues_in_a_mixed_model_of_another_layout_set(tmp_path):
    """A paused run keeps its optimizer moments by parameter name: continued in a mixed model that holds one more
    layout (other columns), each run still gets train_mqar's result."""
    from hlnas.recall.proxy import MqarConfig, paused_at, train_mqar
    from hlnas.recall.replicas import train_mqar_layouts
    from tests.test_replicas import SEEDS_CFG, assert_same_recall

    base = ModelConfig(d_model=32, n_layers=3, vocab_size=32, n_heads=2)
    cfg = MqarConfig(**{**SEEDS_CFG, "lrs": (3e-3,), "target": None})
    first = [(Layout.parse("GGG"), [1]), (Layout.parse("GGA"), [2])]
    with paused_at(str(tmp_path), 4):
        part = train_mqar_layouts(first, base, cfg, device="cpu")
    assert [u[0]["mqar_finished"] for u in part] == [False, False]
    with paused_at(str(tmp_path), None):
        got = train_mqar_layouts([*first, (Layout.parse("AGA"), [3])], base, cfg, device="cpu")
    for (lay, (seed,)), (g,) in zip(first, got):
        solo = train_mqar(lay, base, cfg, seed=seed, device="cpu")
        assert_same_recall({k: v for k, v in g.items() if k not in ("mqar_budget", "mqar_finished")}, solo, f"{lay}")


@pytest.mark.parametrize("m", ["G", "H", "N", "R", "D", "Z", "M"])
def test_slots_that_keep_their_layouts_compute_each_kinds_rows_only_and_train_as_their_solo_runs(m):
    """Nested attention sets in range order (most attention first): at each layer each kind's replicas are one range,
    so each kind computes only its rows (its parameters, bare ones such as A_log included, are its replicas' rows of
    the storage); every replica still trains as its solo run. An order that cannot group the kinds falls back to every
    kind on every row."""
    from hlnas.training.mixed_replicas import kind_ranges, range_order

    lays = [Layout.parse(t.replace("G", m)) for t in ("GGGG", "GGGA", "GAGA", "AAAA")]
    order = range_order(lays)
    assert [str(lays[i]) for i in order] == [t.replace("G", m) for t in ("AAAA", "GAGA", "GGGA", "GGGG")]
    runs = [(lays[i], 1 + i, (3e-3, 1e-3, 2e-3, 1e-3)[i]) for i in order]
    losses, rep, opt = mixed_run(runs, static=True)
    assert rep.static and [m.ranges for m in rep.routers] == kind_ranges([lay for lay, *_ in runs])
    assert rep.routers[1].ranges == [("attention", 0, 2), (runs[3][0].mixers[1], 2, 4)]
    assert rep.routers[1].mixers["attention"].q_proj.weight.shape[0] == 2  # rows of replicas 0 and 1 only
    for r, (lay, seed, lr) in enumerate(runs):
        solo_losses, solo_model = solo_run(lay, CFG, seed, lr)
        assert_same_run(solo_losses, solo_model, losses[r], rep, r, f"{lay} in range mode")
    # unused rows of a narrowed kind never train: replica 3 (GGGG) has no attention at layer 1
    assert not rep.stacked["blocks.1.mixer.mixers.attention.q_proj.weight"].grad[3].any()
    with pytest.raises(ReplicaError, match=f"slot 3 keeps layout {m * 4} .* cannot take {m * 3}A"):
        opt.restart(3, seeded_model(Layout.parse(f"{m * 3}A"), CFG, 9))
    scattered = [Layout.parse(t) for t in ("GGGG", "GGGA", "AGGG", "AAAA")]
    assert kind_ranges([scattered[i] for i in range_order(scattered)]) is None
    assert not replicate_mixed([seeded_model(lay, CFG, 1) for lay in scattered], static=True).static


def test_every_tensor_of_a_mixed_model_lives_on_its_models_device():
    """Models built on another device (meta here; CUDA on the GPU) give a mixed model with nothing left on the CPU:
    a CPU route buffer made the where routing's CUDA graph capture fail (cuda:0 and cpu)."""
    lays = [Layout.parse(t) for t in ("GGGG", "GGGA", "AGGA")]
    rep = replicate_mixed([seeded_model(lay, CFG, 1 + i).to("meta") for i, lay in enumerate(lays)])
    assert not rep.static and [len(m.kinds) for m in rep.routers] == [2, 1, 1, 2]
    off = [n for n, t in [*rep.named_parameters(), *rep.named_buffers()] if t.device.type != "meta"]
    assert not off, off[:5]
