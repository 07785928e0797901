"""``hlnas warm`` (issue #22 point 4): one short trial per mixer at the space's own shapes, budgets cut."""

from __future__ import annotations

import json

import pytest

from hlnas.cli.main import main
from hlnas.errors import ConfigError
from hlnas.search.warm import warm_budget_sets, warm_layouts
from hlnas.space import load_space


def test_layouts_are_each_mixers_densest_hybrid_then_the_control():
    tiny = load_space("tiny")  # ratios pure, 6:1, 3:1 over 6 layers: 3:1 has the most attention layers
    assert warm_layouts(tiny) == ["HHAHHA", "NNANNA", "AAAAAA"]
    assert warm_layouts(tiny, ["hgrn2"]) == ["NNANNA"]
    assert warm_layouts(tiny, ["transformer"]) == ["AAAAAA"]


def test_a_hetero_space_warms_at_its_hetero_ratio():
    hetero = load_space("hetero")  # no ratios of its own: every candidate is 6:1 over 24 layers
    layouts = warm_layouts(hetero)
    assert layouts[0] == "GGGGGA" * 4 and layouts[-1] == "A" * 24
    assert len(layouts) == len(hetero.mixers) + 1


def test_budget_sets_cut_the_budgets_and_keep_every_shape():
    space = load_space("paper_grid")
    short = space.with_sets(warm_budget_sets(space))
    t, mq = short.train, short.score.mqar
    assert (t.batch_size, t.seq_len) == (space.train.batch_size, space.train.seq_len)
    assert (mq.batch, mq.seq_len, mq.eval_every) == (space.score.mqar.batch, space.score.mqar.seq_len,
                                                     space.score.mqar.eval_every)
    assert t.tokens == 2 * t.batch_size * t.seq_len < space.train.tokens  # two LM steps
    assert mq.steps == mq.eval_every < space.score.mqar.steps  # one validation check


def test_an_unknown_mixer_names_what_the_space_allows(capsys):
    with pytest.raises(ConfigError, match="mamba2.*allowed: hgrn, hgrn2, transformer"):
        warm_layouts(load_space("tiny"), ["mamba2"])
    assert main(["warm", "--mixers", "hgrn,mamba2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("hlnas warm: error: mixer(s) mamba2 not in space 'tiny'") and "\n" not in err


def test_warm_runs_a_real_short_trial_per_layout(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["warm", "--mixers", "hgrn", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["layout"] for r in rows] == ["HHAHHA"]
    assert rows[0]["status"] == "ok" and rows[0]["error"] == "" and rows[0]["seconds"] > 0
    assert list(tmp_path.iterdir()) == []  # nothing stored: no study database, no outputs
