"""Every script under experiments/ starts and answers --help: the GPU sessions run them on a lent machine with no
time to find out that one no longer parses its own options (a sweep script once declared an option twice)."""

from __future__ import annotations

import subprocess
import time
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# the runnable ones: a helper module (experiments/bench/results.py) has no command line
SCRIPTS = sorted(p for d in ("experiments", "experiments/bench", "experiments/paper_grid", "experiments/proxy")
                 for p in (ROOT / d).glob("*.py")
                 if "sys.argv" in p.read_text() or "__main__" in p.read_text())

# one process for all of them (torch is imported once): each script's --help must exit 0 and print its usage
RUNNER = """
import contextlib, io, runpy, sys
failed = []
for path in sys.argv[1:]:
    sys.argv = [path, "--help"]
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            runpy.run_path(path, run_name="__main__")
        code = 0
    except SystemExit as e:
        code = e.code
    except Exception as e:
        code = f"{type(e).__name__}: {e}"
    # exit 0, or a usage text naming the script (sys.exit(__doc__))
    if code not in (0, None) and not (isinstance(code, str) and path.rsplit("/", 1)[-1] in code):
        failed.append(f"{path}: {code!r} {out.getvalue()[-300:]}")
    elif not out.getvalue().strip() and not isinstance(code, str):
        failed.append(f"{path}: printed no usage")
print("\\n".join(failed))
sys.exit(1 if failed else 0)
"""


def test_every_experiment_script_answers_help():
    assert len(SCRIPTS) > 10
    r = subprocess.run([sys.executable, "-c", RUNNER, *map(str, SCRIPTS)], capture_output=True, text=True, timeout=600,
                       cwd=ROOT, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]


def test_every_screened_recall_protocol_is_a_valid_setting_of_the_grid_space(monkeypatch):
    """A protocol of experiments/proxy/protocols.yaml that does not build fails on the device, after its start."""
    from hlnas.overrides import config_from_dict
    from hlnas.recall.proxy import MqarConfig, recall_task
    from hlnas.space import load_space

    monkeypatch.syspath_prepend(str(ROOT / "experiments" / "proxy"))
    import screen

    space = load_space(screen.SPACE)
    for name, protocol in screen.protocols().items():
        cfg = config_from_dict(MqarConfig, {**space.score.mqar.to_dict(), **protocol["overrides"]}, f"protocol {name}")
        recall_task(cfg)
        assert protocol["score"] in ("recall", "recall_auc", "recall_beyond"), name
        assert len(screen.plan("subset", name, 0, [])) == 10 and len(screen.plan("cells", name, 1, [])) == 21


def test_screen_rows_become_a_validation_csv_with_the_shared_cards_cost(monkeypatch, tmp_path, capsys):
    """The screen's rows reach `hlnas validate` as one run per case, scored by the protocol's own measure, each
    charged the call's wall over the runs that shared it."""
    import json

    from hlnas.analysis.validation_data import read_proxy_csv

    monkeypatch.syspath_prepend(str(ROOT / "experiments" / "proxy"))
    import screen

    base = {"protocol": "curriculum", "score_metric": "recall_beyond", "seed": 0, "card": "GPU X", "recall": 0.99, "recall_raw": 0.99,
            "recall_baseline": 0.016, "recall_auc": 0.9}
    rows = [dict(base, case="c/transformer/-/0", layout="A" * 24, recall_beyond=0.7, wall_s=80.0),
            dict(base, case="c/gla/3:1/0", layout="GGA" * 8, recall_beyond=0.8, wall_s=240.0),
            {"case": "c/deltanet/3:1/0", "error": "RuntimeError: out of memory"},  # a failed case is no run
            dict(base, protocol="grid", score_metric="recall_auc", case="g/gla/3:1/0", layout="GGA" * 8, wall_s=10.0),
            # cut short by the call's deadline, then run again in the next call: only the finished run counts
            dict(base, case="c/gla/6:1/0", layout="GGGGGA" * 4, recall_beyond=0.1, wall_s=470.0, out_of_time=True),
            dict(base, case="c/gla/6:1/0", layout="GGGGGA" * 4, recall_beyond=0.6, wall_s=60.0, call=2),
            dict(base, case="c/hgrn2/6:1/0", layout="NNNNNA" * 4, recall_beyond=0.5, wall_s=90.0, call=2)]
    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    screen.to_csv("curriculum", [str(src)])
    out = tmp_path / "p.csv"
    out.write_text(capsys.readouterr().out)
    runs = read_proxy_csv(out, "score").runs
    assert {r.recall for r in runs} == {0.99}  # the training setting's recall, which says whether a run learned
    assert sorted((r.mixer, r.ratio, r.value) for r in runs) == [("gla", "3:1", 0.8), ("gla", "6:1", 0.6),
                                                                ("hgrn2", "6:1", 0.5), ("transformer", "full", 0.7)]
    # each call's longest run over the runs that shared its card, whatever their protocol: the first call ran until
    # its deadline (the cut-short run, 470 s) with 4 runs on the card, the next 90 s with 2
    assert sorted(r.gpu_s for r in runs) == [45.0, 45.0, 117.5, 117.5]
    # a run continued from its paused part costs both parts; one started over costs only itself
    more = [dict(base, case="c/hgrn2/3:1/0", layout="NNA" * 8, recall_beyond=0.5, wall_s=100.0, out_of_time=True, call=3),
            dict(base, case="c/hgrn2/3:1/0", layout="NNA" * 8, recall_beyond=0.7, wall_s=30.0, call=4, resumed=True),
            dict(base, case="c/deltanet/6:1/0", layout="DDDDDA" * 4, recall_beyond=0.5, wall_s=100.0, out_of_time=True,
                 call=3),
            dict(base, case="c/deltanet/6:1/0", layout="DDDDDA" * 4, recall_beyond=0.9, wall_s=40.0, call=4)]
    src.write_text(src.read_text() + "".join(json.dumps(r) + "\n" for r in more))
    cost = screen.gpu_seconds([str(src)])
    assert cost["c/hgrn2/3:1/0", "GPU X"] == 50.0 + 20.0 and cost["c/deltanet/6:1/0", "GPU X"] == 20.0
    # the plan runs again what was cut short or failed, and skips what finished
    assert screen.plan("subset", "curriculum", 0, [str(src)]) == [c for c in screen.plan("subset", "curriculum", 0, [])]
    done = tmp_path / "done.jsonl"
    done.write_text("".join(json.dumps(dict(r, case=r["case"].replace("c/", "curriculum/"))) + "\n" for r in rows))
    left = screen.plan("subset", "curriculum", 0, [str(done)])
    assert "curriculum/gla/6:1/0" not in left and "curriculum/deltanet/3:1/0" in left and len(left) == 6
    with pytest.raises(SystemExit, match="no finished rows of protocol 'overwrite'"):
        screen.to_csv("overwrite", [str(src)])


def test_a_screened_case_trains_and_its_row_reaches_the_validation_csv(monkeypatch, tmp_path, capsys):
    """One case end to end on the CPU, at a tiny scale: the row ``one`` writes carries what ``to_csv`` and the table
    read (a row once lost its ``score_metric`` to a misplaced comment, and only the device would have said so); the
    same case paused by a deadline and continued ends as the straight run did."""
    import json

    import yaml

    monkeypatch.syspath_prepend(str(ROOT / "experiments" / "proxy"))
    import screen

    space = yaml.safe_load((ROOT / "search_spaces" / "paper_grid_h200_lr.yaml").read_text())
    space.update(layers=6, ratios=["3:1"], name="tiny")
    space["scale"]["score"]["mqar"].update(steps=8, eval_every=4, batch=4, test=16, val=16, seq_len=64, kv_pairs=8,
                                           vocab=64, compile=False, model={"d_model": 32, "n_heads": 2})
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(space))
    (tmp_path / "protocols.yaml").write_text(yaml.safe_dump(
        {"curriculum": {"score": "recall_beyond", "overrides": {"curriculum_kv": 2, "beyond": [[128, 8]]}}}))
    monkeypatch.setattr(screen, "SPACE", str(tmp_path / "space.yaml"))
    monkeypatch.setenv("SCREEN_PROTOCOLS", str(tmp_path / "protocols.yaml"))
    monkeypatch.setenv("SCREEN_STATE", str(tmp_path / "state"))
    rows = tmp_path / "rows.jsonl"
    screen.one("curriculum/gla/3:1/0", str(rows), time.time() + 300)
    screen.table([str(rows)])
    screen.to_csv("curriculum", [str(rows)])
    out = capsys.readouterr().out
    assert "| curriculum/gla/3:1/0 | cpu | 8 |" in out
    assert out.splitlines()[-1].startswith("GGAGGA,0,")  # layout, seed, then the beyond score
    # a case the deadline pauses keeps its state; the next call continues it to the same curve as a straight run
    paused = tmp_path / "paused.jsonl"
    screen.one("curriculum/gla/3:1/0", str(paused), time.time())  # past its deadline: pauses at the first check
    screen.one("curriculum/gla/3:1/0", str(paused), time.time() + 300)
    first, second = (json.loads(line) for line in paused.read_text().splitlines())
    straight = json.loads(rows.read_text().splitlines()[0])
    assert first["out_of_time"] and first["steps"] == 4 and not first["resumed"]
    assert not second["out_of_time"] and second["resumed"] and second["steps"] == 8
    assert second["curve"] == straight["curve"] and second["recall_beyond"] == straight["recall_beyond"]
    assert not any((tmp_path / "state").iterdir())  # a finished case leaves no state behind


def _rule_rows(score, cards=("GPU A", "GPU B"), seeds=(0, 1)):
    """Finished screen rows of the rule's 21 cells: ``score(mixer, ratio, seed, card)`` each, every run learned."""
    from hlnas.analysis.paper import recall_by_ratio
    from hlnas.model.layout import build_layout

    cells = [("transformer", "-")] + [(m, r) for m in ("deltanet", "gated_deltanet", "gla", "hgrn2")
                                      for r in ("pure", "24:1", "12:1", "6:1", "3:1")]
    table = recall_by_ratio()
    rows = []
    for call, card in enumerate(cards):
        for seed in seeds:
            for m, r in cells:
                layout = "A" * 24 if m == "transformer" else str(build_layout(m, r, 24, "paper"))
                ref = 0.423 if m == "transformer" else table[m][r]
                rows.append({"case": f"p/{m}/{r}/{seed}", "protocol": "p", "call": call * 10 + seed, "score_metric":
                             "recall_beyond", "seed": seed, "card": card, "layout": layout, "wall_s": 21 * 30.0,
                             "recall": 0.97, "recall_raw": 0.97, "recall_baseline": 0.016,
                             "recall_beyond": score(m, r, seed, card, ref)})
    return rows


def test_the_selection_rule_chooses_a_proxy_that_ranks_like_table_7_and_refuses_the_share(monkeypatch, tmp_path):
    """screen.py rule on constructed screens whose answer is known: a stretched copy of Table 7, the same on both
    cards and seeds but for a little noise, passes every point; the attention share alone fails the partial rho;
    one card's run cannot choose, but its failing a point already refuses."""
    import json
    import random

    from hlnas.analysis.paper import attention_share

    monkeypatch.syspath_prepend(str(ROOT / "experiments" / "proxy"))
    import screen

    def write(rows):
        path = tmp_path / f"rows{len(list(tmp_path.iterdir()))}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return [str(path)]

    noise = random.Random(0)
    good = screen.rule("p", write(_rule_rows(lambda m, r, s, c, ref: 5 * (ref - 0.1) + noise.uniform(0, 0.002))))
    assert good["verdict"] == "chosen", good["points"]
    share = screen.rule("p", write(_rule_rows(
        lambda m, r, s, c, ref: 1.0 if m == "transformer" else attention_share(r) + noise.uniform(0, 1e-4))))
    assert share["verdict"] == "not chosen"
    failed = {name for _, name, _, _, ok in share["points"] if ok is False}
    assert any(n.startswith("2. partial rho") for n in failed), share["points"]
    # the bar beside the rule (the share, then state bytes) depends on the cells, not on what the proxy scored
    assert [b[:3] for b in good["bars"]] == [b[:3] for b in share["bars"]] and good["bars"][0][1] == 21
    assert good["bars"][0][2] > good["bars"][0][3]  # the state breaks the share's ties the way Table 7 leans
    one = screen.rule("p", write(_rule_rows(lambda m, r, s, c, ref: 5 * (ref - 0.1), cards=("GPU A",))))
    assert one["verdict"] == "incomplete"
    one_share = screen.rule("p", write(_rule_rows(
        lambda m, r, s, c, ref: 1.0 if m == "transformer" else attention_share(r) + noise.uniform(0, 1e-4),
        cards=("GPU A",))))
    assert one_share["verdict"] == "not chosen"
    # an incomplete card decides only what no score of its open cells could change: a copy of Table 7 less three
    # cells could still pass point 1; the share less the same cells (and a cell with one seed) cannot
    def less(rows):
        return [r for r in rows if r["case"].split("/")[1:3] not in (["gla", "pure"], ["hgrn2", "pure"], ["hgrn2", "24:1"])
                and r["case"] != "p/gated_deltanet/24:1/1"]
    copy = less(_rule_rows(lambda m, r, s, c, ref: 5 * (ref - 0.1) + noise.uniform(0, 0.002), cards=("GPU A",)))
    assert screen.rule("p", write(copy))["verdict"] == "incomplete"
    shared = less(_rule_rows(lambda m, r, s, c, ref: 1.0 if m == "transformer" else attention_share(r) + noise.uniform(0, 1e-4),
                             cards=("GPU A",)))
    got = screen.rule("p", write(shared))
    assert got["verdict"] == "not chosen" and got["points"][-2][1].startswith("1. at best") and got["points"][-2][-1] is False
    # the cards disagree on most cells: point 6 fails
    apart = screen.rule("p", write(_rule_rows(lambda m, r, s, c, ref: 5 * (ref - 0.1) + (0.3 if c == "GPU B" else 0)
                                              + noise.uniform(0, 0.002))))
    assert apart["verdict"] == "not chosen" and apart["points"][-1][-1] is False


def test_the_subset_rule_stops_a_protocol_that_ranks_pure_deltanet_above_its_hybrid(monkeypatch, tmp_path):
    """screen.py subset on constructed subset screens (seed 0's 10 cases): a stretched copy of Table 7 goes on; the
    same with pure DeltaNet on top stops; a screen missing a case is incomplete; a hybrid that never learned stops."""
    import json

    monkeypatch.syspath_prepend(str(ROOT / "experiments" / "proxy"))
    import screen

    monkeypatch.setattr(screen, "protocols", lambda: {"p": {"score": "recall_beyond", "overrides": {}}})
    subset = set(screen.plan("subset", "p", 0, []))

    def write(rows, call_s=300.0):
        path = tmp_path / f"rows{len(list(tmp_path.iterdir()))}.jsonl"
        # the 10 runs shared one call: 30 GPU-s each by default
        path.write_text("".join(json.dumps(dict(r, wall_s=call_s)) + "\n" for r in rows if r["case"] in subset))
        return [str(path)]

    def stretched(m, r, s, c, ref):
        return 5 * (ref - 0.1)

    assert screen.subset_rule("p", write(_rule_rows(stretched, cards=("GPU A",))))["verdict"] == "goes on"
    # 63 GPU-s a candidate: past point 5's bound, so the 21-cell run would be spent for nothing
    assert screen.subset_rule("p", write(_rule_rows(stretched, cards=("GPU A",)), call_s=630.0))["verdict"] == "stops"
    top = screen.subset_rule("p", write(_rule_rows(lambda m, r, s, c, ref: 2.0 if (m, r) == ("deltanet", "pure")
                                                   else stretched(m, r, s, c, ref), cards=("GPU A",))))
    assert top["verdict"] == "stops" and [p for p in top["points"] if p[1].startswith("pure DeltaNet")][0][-1] is False
    rows = [r for r in _rule_rows(stretched, cards=("GPU A",)) if r["case"] != "p/gla/6:1/0"]
    assert screen.subset_rule("p", write(rows))["verdict"] == "incomplete"
    rows = _rule_rows(stretched, cards=("GPU A",))
    for r in rows:
        if r["case"] == "p/hgrn2/6:1/0":
            r.update(recall=0.01, recall_raw=0.02)
    assert screen.subset_rule("p", write(rows))["verdict"] == "stops"
