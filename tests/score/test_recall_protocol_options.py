"""Issue #20's recall-model protocol options (zero-initialised residual outputs, the attention-input conv) and
the graded recall measure (the learning AUC), on CPU."""

from __future__ import annotations

import pytest
import torch

from hlnas.model.catalog import MIXERS
from hlnas.model.config import ModelConfig, preset
from hlnas.errors import ConfigError
from hlnas.model.layout import Layout
from hlnas.model.build import build_model
from hlnas.overrides import yaml_load
from hlnas.recall.baselines import recall_metrics
from hlnas.score.objectives import MqarConfig, ScoreConfig
from hlnas.recall.proxy import learning_auc, recall_model_config, steps_to_target, train_mqar

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models

#: one layer of every registered mixer (the letters of hlnas.model.layout; a window as S and its width)
EVERY_MIXER = "AHNRGDZMKWS8"


def test_every_mixer_has_a_residual_output_projection():
    layout = Layout.parse(EVERY_MIXER)
    assert {m.partition(":")[0] for m in layout.mixers} == set(MIXERS.names())
    model = build_model(layout, preset("proxy-tiny"))
    for block in model.blocks:
        assert isinstance(block.mixer.residual_out(), torch.nn.Linear)


def test_zero_init_makes_every_block_branch_exactly_zero_at_step_0():
    layout = Layout.parse(EVERY_MIXER)
    zero = build_model(layout, preset("proxy-tiny").replace(residual_init="zero"))
    normal = build_model(layout, preset("proxy-tiny"))
    x = torch.randn(2, 12, zero.cfg.d_model)
    for block_z, block_n in zip(zero.blocks, normal.blocks):
        name = type(block_z.mixer).__name__
        assert torch.equal(block_z.mixer(block_z.mixer_norm(x), None), torch.zeros_like(x)), name
        assert torch.equal(block_z.mlp(block_z.mlp_norm(x)), torch.zeros_like(x)), name
        assert torch.equal(block_z(x, None), x), name  # the block is the identity
        assert block_n.mixer(block_n.mixer_norm(x), None).abs().sum() > 0, name  # fla's init: it is not
    # the rest is initialised as before, and the model still learns: the zeroed weights get gradients
    ids = torch.randint(0, zero.cfg.vocab_size, (2, 12))
    zero(ids).logsumexp(-1).mean().backward()
    assert all(b.mlp.down_proj.weight.grad.abs().sum() > 0 for b in zero.blocks)


def test_attention_input_conv_is_causal_and_adds_its_weights():
    cfg = preset("proxy-tiny").replace(mixer_hparams={"attention": {"input_conv": 4}})
    model = build_model(Layout.parse("AAGA"), cfg).double()
    assert model.blocks[0].mixer.input_conv.size == 4
    plain = build_model(Layout.parse("AAGA"), preset("proxy-tiny"))
    assert model.num_params() - plain.num_params() == 3 * 4 * cfg.d_model  # 3 attention layers, depthwise width 4
    ids = torch.randint(0, cfg.vocab_size, (1, 20))
    out = model(ids)
    for t in (0, 7, 18):
        changed = ids.clone()
        changed[0, t + 1] = (changed[0, t + 1] + 1) % cfg.vocab_size
        assert torch.equal(model(changed)[0, : t + 1], out[0, : t + 1])  # token t+1 leaves outputs up to t alone
        assert not torch.allclose(model(changed)[0, t + 1], out[0, t + 1])


def test_shift_init_hands_attention_the_previous_token_at_step_0():
    cfg = preset("proxy-tiny").replace(mixer_hparams={"attention": {"input_conv": 4, "input_conv_init": "shift"}})
    model = build_model(Layout.parse("AGA"), cfg).double()  # built through the model's whole init
    x = torch.randn(2, 9, cfg.d_model, dtype=torch.double)
    for i in (0, 2):
        conv = model.blocks[i].mixer.input_conv
        previous = torch.cat([torch.zeros_like(x[:, :1]), x[:, :-1]], dim=1)
        assert torch.equal(conv(x), previous)  # so the layer sees h_t + h_{t-1}
    # the default start is unchanged: the model's normal init (std 0.02), no tap singled out
    normal = build_model(Layout.parse("AGA"), preset("proxy-tiny").replace(
        mixer_hparams={"attention": {"input_conv": 4}})).blocks[0].mixer.input_conv.weight
    assert 0.01 < normal.std().item() < 0.03 and normal.abs().max().item() < 0.2
    # a fresh seed re-initialises it the same way (replicas and reset_parameters keep the start)
    model.reset_parameters()
    assert model.blocks[0].mixer.input_conv.weight[:, 0, 2].eq(1).all()
    assert model.blocks[0].mixer.input_conv.weight.abs().sum().item() == cfg.d_model


def test_shift2_init_hands_attention_the_two_previous_tokens_at_step_0():
    """For variable tracking's ``x = v``: the value's position sees its variable two tokens back."""
    cfg = preset("proxy-tiny").replace(mixer_hparams={"attention": {"input_conv": 4, "input_conv_init": "shift2"}})
    model = build_model(Layout.parse("AGA"), cfg).double()
    x = torch.randn(2, 9, cfg.d_model, dtype=torch.double)
    zero = torch.zeros_like(x[:, :1])
    previous = torch.cat([zero, x[:, :-1]], dim=1)
    two_back = torch.cat([zero, zero, x[:, :-2]], dim=1)
    for i in (0, 2):
        assert torch.equal(model.blocks[i].mixer.input_conv(x), previous + two_back)  # h_t + h_{t-1} + h_{t-2}
    model.reset_parameters()
    w = model.blocks[0].mixer.input_conv.weight
    assert w[:, 0, 1:3].eq(1).all() and w.abs().sum().item() == 2 * cfg.d_model


def test_split2_init_gives_each_channel_group_one_token_alone_at_step_0():
    """Where shift2 sums h_t, h_{t-1} and h_{t-2} in every channel, split2 hands each third of the channels one of
    them alone, so attention can key on one token of ``y = x`` and read another."""
    cfg = preset("proxy-tiny").replace(mixer_hparams={"attention": {"input_conv": 4, "input_conv_init": "split2"}})
    model = build_model(Layout.parse("AGA"), cfg).double()
    d = cfg.d_model
    x = torch.randn(2, 9, d, dtype=torch.double)
    zero = torch.zeros_like(x[:, :1])
    tokens = [x, torch.cat([zero, x[:, :-1]], dim=1), torch.cat([zero, zero, x[:, :-2]], dim=1)]
    for i in (0, 2):
        seen = x + model.blocks[i].mixer.input_conv(x)  # what the layer's projections see
        for group, token in zip(torch.tensor_split(torch.arange(d), 3), tokens):
            torch.testing.assert_close(seen[..., group], token[..., group], rtol=0, atol=1e-12)  # x - x + h_{t-b}
    # 2/3 of the channels cancel t and copy one earlier token: two taps of weight 1 in size each such channel
    model.reset_parameters()
    w = model.blocks[0].mixer.input_conv.weight
    moved = d - len(torch.tensor_split(torch.arange(d), 3)[0])
    assert w.abs().sum().item() == 2 * moved and w[:, 0, :1].eq(0).all()


@pytest.mark.parametrize(("over", "message"), [
    ({"residual_init": "ones"}, "residual_init='ones' is not allowed; allowed: fla, zero"),
    ({"mixer_hparams": {"attention": {"input_conv": -1}}}, r"attention: input_conv=-1 is not allowed; allowed: 0 \(off\)"),
    ({"mixer_hparams": {"attention": {"input_conv": True}}}, "attention: input_conv=True is not allowed"),
    ({"mixer_hparams": {"attention": {"input_conv": 4, "input_conv_init": "ones"}}},
     "attention: input_conv_init='ones' is not allowed; allowed: normal, shift, shift2, split2"),
    ({"mixer_hparams": {"attention": {"input_conv": 1, "input_conv_init": "shift"}}},
     r"input_conv_init='shift' needs input_conv >= 2 \(a tap for the previous token\), got input_conv=1"),
    ({"mixer_hparams": {"attention": {"input_conv_init": "shift"}}}, "needs input_conv >= 2"),
    ({"mixer_hparams": {"attention": {"input_conv": 2, "input_conv_init": "shift2"}}},
     r"input_conv_init='shift2' needs input_conv >= 3 \(a tap for each of the 2 previous tokens\), got input_conv=2"),
    ({"mixer_hparams": {"attention": {"input_conv": 2, "input_conv_init": "split2"}}},
     r"input_conv_init='split2' needs input_conv >= 3 \(a tap for each of the 2 previous tokens\), got input_conv=2"),
])
def test_bad_protocol_options_are_named(over, message):
    with pytest.raises(ConfigError, match=message):
        build_model(Layout.parse("AA"), recall_model_config(preset("proxy-tiny"), over, 32))


def test_old_stored_settings_read_back_with_todays_behaviour():
    # a score section and a model config stored before these options existed
    old = yaml_load("mqar: {seq_len: 64, kv_pairs: 8, model: {d_model: 64, n_heads: 2}}")
    sc = ScoreConfig.from_dict(old)
    rcfg = recall_model_config(preset("proxy-tiny"), dict(sc.mqar.model), 64)
    assert rcfg.residual_init == "fla" and "attention" not in rcfg.mixer_hparams
    m = ModelConfig.from_dict({k: v for k, v in preset("proxy-tiny").to_dict().items() if k != "residual_init"})
    assert m.residual_init == "fla"
    model = build_model(Layout.parse("AG"), rcfg)
    assert model.blocks[0].mixer.input_conv is None and model.blocks[0].mlp.down_proj.weight.abs().sum() > 0
    # and the new ones are written and read back
    new = ScoreConfig.from_dict({"mqar": {"model": {"residual_init": "zero", "mixer_hparams": {"attention": {"input_conv": 4}}}}})
    assert ScoreConfig.from_dict(new.to_dict()) == new


# -- the graded measure ---------------------------------------------------------------------------------------------
def test_learning_auc_grades_how_soon_a_run_learns():
    # baseline 0.2: 0.2 is corrected 0, 1.0 is 1
    never = [[100, 0.2], [200, 0.18], [300, 0.19], [400, 0.2]]
    assert learning_auc(never, 400, 0.2, False) == 0.0
    late = [[100, 0.2], [200, 0.2], [300, 0.6], [400, 1.0]]
    early = [[100, 1.0]]  # stopped at its target at step 100: held there to the budget
    assert learning_auc(early, 400, 0.2, True) == pytest.approx((50 + 300) / 400)
    assert learning_auc(late, 400, 0.2, False) == pytest.approx((25 + 75) / 400)
    assert learning_auc(early, 400, 0.2, True) > learning_auc(late, 400, 0.2, False) > 0
    # stopped early without reaching its target (a time budget): nothing credited after the last check
    assert learning_auc([[100, 1.0]], 400, 0.2, False) == pytest.approx(50 / 400)
    with pytest.raises(ConfigError, match="step budget must be >= 1"):
        learning_auc(early, 0, 0.2, True)
    assert steps_to_target(late, 0.99) == 400 and steps_to_target(never, 0.9) is None and steps_to_target(late, None) is None


def test_train_mqar_stores_the_graded_measure_and_its_settings():
    cfg = MqarConfig(seq_len=16, kv_pairs=2, vocab=16, batch=8, steps=40, eval_every=20, test=32, val=32, target=0.99,
                     model={"d_model": 32, "n_heads": 2, "mlp_hidden": 32, "residual_init": "zero",
                            "mixer_hparams": {"attention": {"input_conv": 4}}})
    out = train_mqar(Layout.parse("AA"), preset("proxy-tiny"), cfg, seed=0, device="cpu")
    run = out["mqar"]["runs"][0]
    assert out["mqar_auc"] == run["auc"] == learning_auc(run["curve"], 40, out["mqar_val_baseline"],
                                                         run["steps_to_target"] is not None)
    assert 0 <= out["mqar_auc"] <= 1 and out["mqar_val_baseline"] == pytest.approx(0.5, abs=0.05)
    assert out["mqar"]["model"]["residual_init"] == "zero" and out["mqar"]["attention_input_conv"] == 4
    # the study's recall metrics carry it as recall_auc, an objective a space may choose
    assert recall_metrics(out)["recall_auc"] == out["mqar_auc"]


def test_the_recall_models_weight_decay_is_a_setting():
    with pytest.raises(ConfigError, match="score.mqar.weight_decay must be a number >= 0, got -1"):
        ScoreConfig.from_dict({"mqar": {"weight_decay": -1}})
    base = dict(seq_len=16, kv_pairs=2, vocab=16, batch=8, steps=20, eval_every=10, test=16, val=16,
                model={"d_model": 32, "n_heads": 2, "mlp_hidden": 32})
    a = train_mqar(Layout.parse("AA"), preset("proxy-tiny"), MqarConfig(**base), device="cpu")
    b = train_mqar(Layout.parse("AA"), preset("proxy-tiny"), MqarConfig(**base, weight_decay=0.0), device="cpu")
    assert a["mqar_final_loss"] != b["mqar_final_loss"]  # the setting reaches the optimizer
    assert MqarConfig().weight_decay == 0.1  # stored studies without it read back with the old fixed value


def test_a_compiled_recall_step_trains_the_same_run_and_bad_backends_are_named():
    """score.mqar.compile (issue #21 point 2; measured on the GPU by experiments/bench/proxy_throughput.py mode
    ``compiled``): the step runs the model under torch.compile and the run is the eager one within float rounding.
    On CPU with the aot_eager backend (the same ops traced by dynamo and AOTAutograd, no C++ build), 20 steps of a
    hybrid with a short conv and a custom-autograd scan."""
    base = dict(seq_len=16, kv_pairs=2, vocab=16, batch=8, steps=20, eval_every=10, test=16, val=16,
                model={"d_model": 32, "n_heads": 2, "mlp_hidden": 32, "mixer_hparams": {"hgrn": {"use_short_conv": True}}})
    a = train_mqar(Layout.parse("HA"), preset("proxy-tiny"), MqarConfig(**base), device="cpu")
    b = train_mqar(Layout.parse("HA"), preset("proxy-tiny"), MqarConfig(**base, compile="aot_eager"), device="cpu")
    ca, cb = a["mqar"]["runs"][0]["curve"], b["mqar"]["runs"][0]["curve"]
    assert [c[0] for c in ca] == [c[0] for c in cb] == [10, 20]
    assert [c[2] for c in cb] == pytest.approx([c[2] for c in ca], abs=1e-4)  # the losses at the checks
    assert b["mqar_acc"] == pytest.approx(a["mqar_acc"], abs=1 / 16)
    assert ScoreConfig.from_dict({"mqar": {"compile": True}}).mqar.compile is True
    assert MqarConfig().compile is False  # stored studies without it read back uncompiled
    with pytest.raises(ConfigError, match="score.mqar.compile is true or false or a string; got 3"):
        ScoreConfig.from_dict({"mqar": {"compile": 3}})
    with pytest.raises(ConfigError, match=r"score.mqar.compile='no_such_backend'.*Allowed: true, false or one of .*inductor"):
        train_mqar(Layout.parse("A"), preset("proxy-tiny"), MqarConfig(**base, compile="no_such_backend"), device="cpu")
