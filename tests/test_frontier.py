"""The shipped ``frontier`` space and its CPU tiny twin: the same mixers, placements and attention kinds at 4 layers of
32 wide, with a window (8) shorter than the twin's sequences so that it binds. The twin validates whole (every layout
builds, costs and exports or is refused in a line) and a few of its trials run the real search loop, one training step
each."""

from __future__ import annotations

import pytest
from optuna.trial import TrialState

from hlnas.analysis.export import Candidate, export
from hlnas.analysis.fla_config import Scale
from hlnas.calibration.protocol import plan
from hlnas.model.catalog import PAPER_MIXERS
from hlnas.model.cost import layout_cost
from hlnas.search.study import run_search
from hlnas.search.options import SearchOptions
from hlnas.space import load_space, space_from_dict

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models

FRONTIER = load_space("frontier")
TWIN_SCALE = {
    "preset": "proxy-tiny",
    "model": {"d_model": 32, "n_heads": 2, "mlp_hidden": 64},
    "train": {"tokens": 64, "batch_size": 4, "seq_len": 16, "val_batches": 1, "log_every": 1, "lr": 3e-3},  # one step
    "data": {"source": "synthetic"},
    "score": {"objectives": ["val_loss", "mqar"],
              "mqar": {"steps": 1, "test": 8, "val": 8, "batch": 4, "seq_len": 16, "kv_pairs": 2, "eval_every": 1}},
    "kv_context": 64,
}


def twin(**top):
    raw = {k: v for k, v in FRONTIER.to_dict().items() if k not in ("scale", "calibration", "name")}
    raw.update(name="frontier-twin", layers=4, ratios=["pure", "4:1", "2:1"], attention=["full", "swa:8"],
               scale=TWIN_SCALE, calibration={"enabled": False})
    raw.update(top)
    return space_from_dict(raw)


def test_frontier_is_the_papers_mixers_and_the_new_ones():
    assert set(FRONTIER.mixers) == {*PAPER_MIXERS, "kda", "rwkv7"}
    assert FRONTIER.ratios == ("pure", "24:1", "12:1", "6:1", "3:1")
    assert FRONTIER.placements == ("paper", "group") and FRONTIER.attention_kinds == ("full", "swa:1024")
    layouts = FRONTIER.candidates()
    assert len(layouts) == 121 and len({str(x) for x in layouts}) == 121
    gdn = FRONTIER.layout({"mixer": "gated_deltanet", "ratio": "3:1", "placement": "group", "attention": "swa:1024"})
    assert str(gdn) == "ZZZS1024" * 6  # Qwen3-Next's 3:1, attention windowed
    # the calibration keeps the full-attention control and full-attention hybrids
    runs = plan(FRONTIER)
    assert runs[0].role == "control" and runs[0].layout == "A" * 24
    assert all("S" not in r.layout for r in runs)


def test_the_tiny_twin_validates_whole():
    sp = twin()
    layouts = sp.candidates()
    assert len(layouts) == 8 * 7 + 1  # pure, 4:1 (placements agree) x 2 kinds, 2:1 x 2 placements x 2 kinds; Transformer
    windowed = [x for x in layouts if x.window_layers]
    assert windowed and all(layout_cost(x, sp.model, context=64).kv_cache_bytes
                            < layout_cost(sp.layout({**p, "attention": "full"}), sp.model, context=64).kv_cache_bytes
                            for p, x in zip(sp.grid(), layouts) if x.window_layers)
    refused = {}
    for x in layouts:  # each exports at an explicit scale, or says why not in one line
        e = export(Candidate(x.key, x, sp.model, "twin"), Scale(width=64, heads=4, vocab=256))
        if e.refusal:
            refused[str(x)] = e.refusal
            assert "\n" not in e.refusal
    assert refused and all(k.count("W") and "rwkv7 hybrids" in v for k, v in refused.items())


def test_a_few_twin_trials_run_the_search_loop(tmp_path):
    """KDA and RWKV-7 hybrids with windowed attention placed as Qwen3-Next places it, and a full-attention GDN one."""
    sp = twin(mixers=["kda", "rwkv7", "gated_deltanet"], ratios=["2:1"], placements=["group"], attention=["swa:8"],
              transformer=False, sampler="grid")
    study = run_search(sp, SearchOptions(storage=f"sqlite:///{tmp_path}/t.db", study_name="twin", n_trials=3))
    done = study.get_trials(states=(TrialState.COMPLETE,))
    assert sorted(t.user_attrs["layout"] for t in done) == ["S8KKS8", "S8WWS8", "S8ZZS8"]
    for t in done:
        assert t.user_attrs["kv_cache_bytes"] == 2 * 2 * 2 * 16 * 8 * 2  # 2 SWA layers x K,V x 2 heads x 16 x window 8 x bf16
        assert t.user_attrs["val_loss"] > 0 and t.user_attrs["recall"] is not None
