"""``hlnas export``: every exported config, built by fla's own ``AutoModelForCausalLM.from_config`` on the meta device,
is the model hlnas's cost model counts for the same layout (parameters within 1 %, KV cache and state exact at 4k);
layouts fla cannot express are refused in one line; the scale carries the candidate's settings; the CLI writes the
folders, and ``hlnas status`` offers the command for each front member."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from hlnas.analysis.export import Candidate, compare_costs, export, fla_cost, study_candidates
from hlnas.analysis.fla_config import FLA_FAMILIES, ExportError, Scale, at_depth, fla_config, scaled_model
from hlnas.model.config import preset
from hlnas.model.layout import Layout, build_layout

pytest.importorskip("fla.models", exc_type=ImportError)
pytest.importorskip("transformers")

EXPLICIT = Scale(width=192, depth=8, heads=6, kv_heads=2, vocab=1000)  # GQA, a depth the layouts re-lay at
PAPER = Scale(preset="paper-340m")


def _layouts(n: int) -> list[Layout]:
    """Each fla family pure and hybrid (paper and group placement), windows as a hybrid's attention and beside full
    attention, the Transformer and the all-window model: every kind of config the export writes."""
    out = []
    for m in FLA_FAMILIES:
        out.append(build_layout(m, "pure", n))
        if m != "rwkv7":  # refused: test_refusals_name_what_fla_lacks
            out += [build_layout(m, "4:1", n), build_layout(m, "3:1", n, "group")]
    out += [build_layout("gated_deltanet", "4:1", n, attention="swa:1024"), build_layout("transformer", None, n),
            Layout(("kda", "swa:512", "kda", "attention") * (n // 4)), build_layout("swa:512", "pure", n)]
    return out


def _check(layout: Layout, scale: Scale):
    exp = export(Candidate(layout.key, layout, None, "test"), scale)
    assert exp.refusal is None, exp.refusal
    got = fla_cost(exp.config, context=4096)
    assert compare_costs(exp) == []
    assert got["kv_cache_bytes"] == exp.cost.kv_cache_bytes and got["state_bytes"] == exp.cost.state_bytes
    assert abs(got["params"] - exp.cost.params) <= 0.01 * exp.cost.params
    # RWKV-7's channel mix keeps one token a layer, which hlnas's SwiGLU blocks do not: the one stated difference
    d, n = exp.model.d_model, exp.model.n_layers
    assert got["channel_mix_state_bytes"] == (n * d * 2 if exp.config["model_type"] == "rwkv7" else 0)
    return exp, got


@pytest.mark.parametrize("layout", _layouts(8), ids=str)
def test_fla_builds_what_hlnas_costs_at_an_explicit_scale(layout):
    exp, got = _check(layout, EXPLICIT)
    assert exp.model.d_model == 192 and exp.model.kv_heads == 2 and exp.config["num_hidden_layers"] == 8
    if exp.config.get("attn"):
        specs = exp.config["attn"] if isinstance(exp.config["attn"], list) else [exp.config["attn"]]
        assert sorted(i for s in specs for i in s["layers"]) == list(exp.layout.attention_layers)
        assert {s["num_kv_heads"] for s in specs} == {2}


@pytest.mark.parametrize("layout", _layouts(4), ids=str)
def test_fla_builds_what_hlnas_costs_at_paper_340m(layout):
    exp, _ = _check(layout, PAPER)
    assert exp.layout.n_layers == 24 and exp.config["hidden_size"] == 1024  # re-laid at the paper's depth
    assert abs(exp.cost.params - 340e6) / 340e6 < 0.1


@pytest.mark.parametrize("layout", [build_layout("gated_deltanet", "6:1", 24), build_layout("kda", "3:1", 24, "group"),
                                    build_layout("hgrn2", "12:1", 24, attention="swa:1024")], ids=str)
def test_fla_builds_what_hlnas_costs_at_paper_1_3b(layout):
    exp, _ = _check(layout, Scale(preset="paper-1.3b"))
    assert exp.config["hidden_size"] == 2048 and abs(exp.cost.params - 1.3e9) / 1.3e9 < 0.1


def test_the_window_is_written_and_bounds_the_kv():
    cfg = fla_config(Layout.parse("ZS64ZA"), preset("proxy-tiny"))
    swa, full = cfg["attn"]
    assert swa == {"layers": [1], "num_heads": 4, "num_kv_heads": 4, "qkv_bias": False, "window_size": 64,
                   "rope_theta": 10000.0}
    assert full["layers"] == [3] and full["window_size"] is None
    assert fla_config(build_layout("swa:64", "pure", 2), preset("proxy-tiny"))["window_size"] == 64


@pytest.mark.parametrize("layout, cfg, message", [
    (build_layout("mamba2", "pure", 4), None, "mamba2: fla's mamba2 family builds blocks of a norm and the mixer alone"),
    (build_layout(["gla", "deltanet", "gla"], placement=[2]), None, r"linear mixers that differ per block \(gla, deltanet\)"),
    (build_layout("rwkv7", "2:1", 4), None, "rwkv7 hybrids: fla 0.6.0.s RWKV-7 block .*\\(fla PR #145\\)"),
    (Layout.parse("S64AS64A"), None, "mixes attention kinds .* one window_size for every layer"),
    (build_layout("gla", "2:1", 4), {"gla": {"gate_fn": "sigmoid"}}, "gla: gate_fn='sigmoid' has no field in fla's gla config"),
    (build_layout("gla", "2:1", 4), {"gla": {"gate_low_rank_dim": 32}}, "gate_low_rank_dim=32 .* built with 16"),
    (build_layout("hgrn2", "2:1", 4), {"hgrn2": {"use_short_conv": True, "conv_bias": True}}, "conv_bias=True"),
    (build_layout("gla", "2:1", 4), {"attention": {"input_conv": 4}}, "input_conv=4: fla's attention layer has no input"),
])
def test_refusals_name_what_fla_lacks(layout, cfg, message):
    model = preset("proxy-tiny").replace(mixer_hparams=cfg or {})
    with pytest.raises(ExportError, match=message) as e:
        fla_config(layout, model)
    assert "\n" not in str(e.value)


def test_the_scale_carries_what_the_candidate_was_trained_with():
    trained = preset("proxy-tiny").replace(window=None, rope_theta=500000.0,
                                           mixer_hparams={"hgrn": {"use_short_conv": True}, "gated_deltanet": {"expand_v": 2.0}})
    cfg = scaled_model(PAPER, trained, 6)
    assert (cfg.d_model, cfg.n_layers, cfg.vocab_size, cfg.target_params) == (1024, 24, 32000, 340_000_000)
    assert cfg.mixer_hparams["hgrn"] == {"use_short_conv": True} and cfg.rope_theta == 500000.0
    exp = export(Candidate("c", build_layout("hgrn", "3:1", 6), trained, "t"), PAPER)
    assert exp.config["use_short_conv"] is True and exp.config["attn"]["rope_theta"] == 500000.0
    assert export(Candidate("c", build_layout("gdn", "pure", 6), trained, "t"), PAPER).config["expand_v"] == 2.0
    # the defaults that depend on the width are the new width's: GDN's 4 heads of 256 at 1024
    assert export(Candidate("c", build_layout("gdn", "pure", 6), None, "t"), PAPER).config["head_dim"] == 256


def test_scale_and_depth_errors():
    with pytest.raises(ExportError, match="an explicit scale needs --heads, --vocab"):
        scaled_model(Scale(width=64), None, 4)
    with pytest.raises(ExportError, match="scale 'paper-7b' is not a preset; allowed: paper-340m, paper-1.3b"):
        scaled_model(Scale(preset="paper-7b"), None, 4)
    assert str(at_depth(build_layout("gla", "6:1", 12, "group"), 24)) == str(build_layout("gla", "6:1", 24, "group"))
    with pytest.raises(ExportError, match="follow no placement"):
        at_depth(build_layout("gla", placement=[0, 3], n_layers=6), 12)
    refused = export(Candidate("c", build_layout("gla", placement=[0, 3], n_layers=6), None, "t"), PAPER)
    assert refused.config is None and "export it at its depth" in refused.refusal
    refused = export(Candidate("c", build_layout("gla", "6:1", 6), None, "t"), EXPLICIT)  # 8 layers
    assert refused.refusal.startswith("re-laying GGGGGA at 8 layers: ratio 6:1 does not divide 8 layers")


@pytest.fixture
def cli(capsys):
    """``hlnas ARGS`` in this process -> (returncode, stdout, stderr)."""
    from hlnas.cli.main import main

    def run(*args):
        rc = main(list(args))
        out = capsys.readouterr()
        return SimpleNamespace(returncode=rc, stdout=out.out, stderr=out.err)

    return run


@pytest.fixture
def study_url(tmp_path):
    from hlnas.space import load_space
    from tests.studies import add_trial, make_study, trial_attrs

    url = f"sqlite:///{tmp_path}/s.db"
    study = make_study(url, mixers=("gla", "hgrn2"), ratios=("pure", "6:1"), transformer=False, failed=False, infeasible=False)
    space = load_space("tiny").to_dict()  # HGRN-2 with its short convolution: the setting must travel
    study.set_user_attr("hlnas_space", {**space, "layers": 24})
    add_trial(study, trial_attrs("hgrn2", "3:1", recall=0.99, kv_cache_bytes=1))  # the front's best
    return url


def test_cli_exports_a_trial_and_the_front(study_url, tmp_path, cli):
    out = tmp_path / "fla"
    r = cli("export", "--storage", study_url, "--study", "hlnas-test", "--front", "--out", str(out), "--check")
    assert r.returncode == 0, r.stderr
    assert "parameters, KV cache and state match" in r.stdout
    front = [c.label for c in study_candidates(study_url, "hlnas-test", front=True)]
    assert sorted(p.name for p in out.iterdir()) == sorted(front)
    best = next(c for c in study_candidates(study_url, "hlnas-test", front=True) if str(c.layout) == "NNA" * 8)
    cfg = json.loads((out / best.label / "config.json").read_text())
    assert cfg["model_type"] == "hgrn2" and cfg["use_short_conv"] is True and cfg["attn"]["layers"] == list(range(2, 24, 3))
    readme = (out / best.label / "README.md").read_text()
    assert "flame" in readme and "config.json" in readme and '{"hgrn": {"use_short_conv": true}' in readme


def test_cli_layout_string_refusal_and_status(study_url, tmp_path, cli):
    r = cli("export", "GGAGGA", "--width", "64", "--heads", "4", "--vocab", "256", "--out", str(tmp_path / "o"))
    assert r.returncode == 0, r.stderr
    cfg = json.loads((tmp_path / "o" / "GGAGGA" / "config.json").read_text())
    assert cfg["hidden_size"] == 64 and cfg["num_hidden_layers"] == 6 and cfg["attn"]["layers"] == [2, 5]
    r = cli("export", "MMA")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "mamba2: fla's mamba2 family" in r.stderr
    r = cli("export")
    assert r.returncode == 2 and "give one of: a layout string, --trial N" in r.stderr
    r = cli("status", "--storage", study_url)
    assert r.returncode == 0, r.stderr
    assert "export a front member as an fla model config" in r.stdout
    assert f"hlnas export --storage {study_url} --study hlnas-test --trial" in r.stdout


def test_the_dashboards_layout_picture_names_the_export(study_url):
    from hlnas.analysis.figures import layout_info, plot_layouts
    from hlnas.analysis.pareto import load_study, study_data

    fig = plot_layouts(layout_info(study_data(load_study(study_url, "hlnas-test"))))
    notes = [a.text for a in fig.layout.annotations]
    assert any("hlnas export --study hlnas-test --trial #" in t and "docs/export.md" in t for t in notes), notes
