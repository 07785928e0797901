"""The command line: --help on every subcommand, layout JSON, train/eval round trip. (Bad inputs and their errors:
tests/test_bad_inputs.py.)"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hlnas.cli.main import build_parser, main

SUBCOMMANDS = ["layout", "train", "eval", "search", "calibrate", "status", "dashboard", "report", "validate", "bench-samplers"]


def test_every_subcommand_has_help(capsys):
    for name in SUBCOMMANDS:
        with pytest.raises(SystemExit) as e:
            main([name, "--help"])
        assert e.value.code == 0
        assert f"usage: hlnas {name}" in capsys.readouterr().out
    assert set(SUBCOMMANDS) <= set(build_parser()._subparsers._group_actions[0].choices)


def test_console_script_help_runs():
    out = subprocess.run([sys.executable, "-m", "hlnas.cli.main", "--help"], capture_output=True, text=True, check=True).stdout
    for name in SUBCOMMANDS:
        assert name in out


def test_layout_json_has_the_documented_keys(capsys):
    assert main(["layout", "gated_deltanet", "--ratio", "6:1", "--layers", "24", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    for key in ("layout", "attention_layers", "params", "kv_cache_bytes", "state_bytes", "flops_per_token"):
        assert key in d
    assert d["attention_layers"] == [5, 11, 17, 23] and d["layout"] == "ZZZZZA" * 4
    assert d["kv_cache_bytes"] == 2 * 16 * 64 * 4096 * 4 * 2  # 4 attention layers, bf16, batch 1, context 4096


def test_layout_context_and_pure(capsys):
    main(["layout", "gla", "--ratio", "pure", "--json", "--context", "32768"])
    d = json.loads(capsys.readouterr().out)
    assert d["kv_cache_bytes"] == 0 and d["state_bytes"] > 0 and d["attention_layers"] == []


def test_train_then_eval(tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(["train", "transformer", "--set", "layout.layers=2", "--tokens", "4096", "--seq-len", "32", "--batch-size", "4",
               "--out", str(out), "--no-progress", "--set", "data.val_docs=4", "--set", "train.val_batches=2"])
    assert rc == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["status"] == "ok" and metrics["steps"] == 32 and metrics["layout"] == "AA"
    assert (out / "checkpoint.pt").exists() and (out / "recipe.yaml").exists()
    capsys.readouterr()
    assert main(["eval", str(out), "--objectives", "val_loss,mqar", "--set", "score.mqar.steps=3",
                 "--set", "score.mqar.test=16"]) == 0
    scores = json.loads((out / "eval.json").read_text())
    assert scores["val_loss"] > 0 and 0 <= scores["mqar_acc"] <= 1
    assert abs(scores["val_loss"] - metrics["val_loss"]) < 1e-4  # same held-out batches as the trainer's
    assert metrics["recipe"]["layout"] == "AA" and "scores" not in metrics  # trained without --score
    # the score section eval reads: the recipe's, with --set and --objectives over it
    from hlnas.pipeline.run import checkpoint_score_config

    cfg = checkpoint_score_config(out, ["score.mqar.steps=3"], ["mqar"])
    assert cfg.objectives == ("mqar",) and cfg.mqar.steps == 3 and cfg.mqar.test == 256
    assert checkpoint_score_config(tmp_path / "nothing").objectives == ("val_loss", "mqar")  # no recipe: the defaults


def test_train_layout_string_replaces_the_recipe_files_layout(tmp_path):
    from hlnas.pipeline.recipe import load_recipe

    cfg = tmp_path / "r.yaml"
    cfg.write_text("layout: {mixer: gla, ratio: '6:1'}\ntrain: {tokens: 4096}\n")
    assert str(load_recipe(cfg).layout) == "GGGGGA" * 4
    recipe = load_recipe(cfg, ["train.lr=2e-3"], layout="GGA")
    assert str(recipe.layout) == "GGA" and (recipe.train.tokens, recipe.train.lr) == (4096, 2e-3)


def test_mixed_replicas_reach_the_calibration_as_family(monkeypatch, tmp_path):
    """``--mixed-replicas`` gives the calibration replicas='family'; ``--replicas`` True; neither False."""
    seen = []  # the command imports calibrate_study when it runs: the module's attribute is what it calls
    monkeypatch.setattr("hlnas.search.study.calibrate_study", lambda *a, **k: (seen.append(k["replicas"]), ("valid", "ok"))[1])
    url = f"sqlite:///{tmp_path}/c.db"
    for flags in ([], ["--replicas"], ["--mixed-replicas"]):
        main(["calibrate", "search_spaces/tiny.yaml", "--storage", url, *flags])
    assert seen == [False, True, "family"]
