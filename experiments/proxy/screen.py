"""Screen recall protocols (experiments/proxy/protocols.yaml) on the paper grid's cells, several runs sharing one GPU.

Each case is PROTOCOL/MIXER/RATIO/SEED (MIXER 'transformer' takes no ratio: PROTOCOL/transformer/-/SEED). A case
trains the fresh recall model of the grid space's layout under the protocol's score.mqar overrides, through hlnas's own
recall proxy, and writes one JSON line: the recall result with every score beside its no-recall baseline, the steps,
the GPU-seconds and the card.

    python experiments/proxy/screen.py run OUT.jsonl DEADLINE_S NPROC CASE...
    python experiments/proxy/screen.py plan subset|cells PROTOCOL SEED [DONE.jsonl...]   # the cases not yet done
    python experiments/proxy/screen.py table RESULTS.jsonl...      # one row per case
    python experiments/proxy/screen.py csv PROTOCOL RESULTS.jsonl... > P.csv   # hlnas validate --csv P.csv --measure score
    python experiments/proxy/screen.py rule PROTOCOL RESULTS.jsonl...    # each point of the selection rule, the verdict
    python experiments/proxy/screen.py subset PROTOCOL RESULTS.jsonl...  # the subset screen's rule: go on or stop
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SPACE = os.environ.get("SCREEN_SPACE", str(HERE.parents[1] / "search_spaces" / "paper_grid_h200_lr.yaml"))


def protocols() -> dict:
    import yaml

    return yaml.safe_load(Path(os.environ.get("SCREEN_PROTOCOLS", HERE / "protocols.yaml")).read_text())


def state_dir(case: str, raw: dict, layout) -> Path:
    """Where a case the deadline paused keeps its model and optimizer (``SCREEN_STATE``, default ``.screen_state`` in
    the repository: git-ignored and never carried, so it outlives a device call on a machine kept warm, not the
    machine), named by the case and a digest of its settings, so an edited protocol never continues an old run."""
    import hashlib

    digest = hashlib.sha256(json.dumps([raw, str(layout)], sort_keys=True, default=str).encode()).hexdigest()[:12]
    root = os.environ.get("SCREEN_STATE") or HERE.parents[1] / ".screen_state"
    return Path(root) / f"{case.replace('/', '_')}_{digest}"


def one(case: str, out: str, deadline: float) -> None:
    import shutil

    import torch

    from hlnas.recall.baselines import recall_metrics
    from hlnas.recall.proxy import MqarConfig, paused_at, train_mqar
    from hlnas.overrides import config_from_dict
    from hlnas.space import load_space

    name, mixer, ratio, seed = case.split("/")
    proto = protocols()[name]
    sp = load_space(SPACE)
    raw = {**sp.score.mqar.to_dict(), **proto["overrides"]}
    cfg = config_from_dict(MqarConfig, raw, "score.mqar")
    params = {"mixer": mixer} if mixer == "transformer" else {"mixer": mixer, "ratio": ratio, "placement": "paper"}
    layout = sp.layout(params)
    state = state_dir(case, raw, layout)
    resumed = state.is_dir() and any(state.iterdir())
    state.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    # paused at the first check past the deadline, its state kept: the next call on this machine continues it exactly
    with paused_at(str(state), None, until=deadline - 30):
        r = train_mqar(layout, sp.model, cfg, seed=int(seed), device="cuda" if torch.cuda.is_available() else "cpu")
    r.update(recall_metrics(r))
    out_of_time = not r["mqar_finished"]
    if not out_of_time:
        shutil.rmtree(state, ignore_errors=True)
    row = {"case": case, "protocol": name, "call": int(deadline),  # the runs of one call share its deadline
           "score_metric": proto["score"], "mixer": mixer, "ratio": ratio, "resumed": resumed,
           "seed": int(seed), "layout": str(layout), "card": r.get("mqar_device_name"), "wall_s": round(time.time() - t0, 1),
           "steps": r["mqar_steps_done"], "reached": r["mqar_steps_to_target"], "out_of_time": out_of_time,
           "recall": r["recall"], "recall_raw": r["recall_raw"], "recall_baseline": r["recall_baseline"],
           "recall_auc": r.get("recall_auc"), "recall_beyond": r.get("recall_beyond"),
           "beyond": r.get("mqar_beyond_settings"), "error": r.get("mqar_error"),
           "curve": r["mqar"]["runs"][-1]["curve"], "fallbacks": r["mqar"].get("kernel_fallbacks")}
    with open(out, "a") as f:
        f.write(json.dumps(row) + "\n")
    print(case, "steps", row["steps"], "reached", row["reached"], "recall", round(row["recall"], 3),
          f"(raw {row['recall_raw']:.3f} [{row['recall_baseline']:.3f}])", "beyond", row["recall_beyond"], flush=True)


def work(out: str, deadline: float, cases: list[str]) -> None:
    for c in cases:
        if time.time() > deadline - 60:
            print("skipped (time)", c, flush=True)
            continue
        try:
            one(c, out, deadline)
        except Exception as e:  # a failed case is a row, the others go on
            with open(out, "a") as f:
                f.write(json.dumps({"case": c, "error": f"{type(e).__name__}: {e}"[:400]}) + "\n")
            print("failed", c, type(e).__name__, e, flush=True)


def drive(out: str, seconds: float, nproc: int, cases: list[str]) -> None:
    deadline = time.time() + seconds
    groups = [cases[i::nproc] for i in range(nproc)]
    procs = [subprocess.Popen([sys.executable, __file__, "work", out, str(deadline), *g]) for g in groups if g]
    for p in procs:
        p.wait()


TABLE7_MIXERS = ("deltanet", "gated_deltanet", "gla", "hgrn2")  # the mixers of the paper's Table 7


def plan(which: str, protocol: str, seed: int, done_paths: list[str]) -> list[str]:
    """The subset screen (6:1 and 3:1 of the Table 7 mixers, pure DeltaNet, and the control) or the rule's 21 cells
    (every ratio of the Table 7 mixers, and the Transformer) for one protocol and seed, less the cases a results file
    already holds (a finished row, not a failed one), the control first."""
    if protocol not in protocols():
        raise SystemExit(f"screen.py: unknown protocol {protocol!r}; allowed: {', '.join(protocols())}")
    ratios = {"subset": ("3:1", "6:1"), "cells": ("3:1", "6:1", "12:1", "24:1", "pure")}[which]
    cases = [f"{protocol}/transformer/-/{seed}"] + [f"{protocol}/{m}/{r}/{seed}" for r in ratios for m in TABLE7_MIXERS]
    if which == "subset":  # pure DeltaNet below its 3:1 hybrid: the at-scale finding `curriculum` ranked upside down
        cases.append(f"{protocol}/deltanet/pure/{seed}")
    done = {case for case, _ in finished(done_paths)}  # a call's rows file holds one kind of card
    return [c for c in cases if c not in done]


def run_rows(paths: list[str]) -> list[dict]:
    """Every run's row in ``paths`` (files not there yet hold none), in the order run; failed cases' rows left out."""
    rows = (json.loads(line) for p in paths if Path(p).exists() for line in open(p) if line.strip())
    return [r for r in rows if "protocol" in r]


def finished(paths: list[str]) -> dict:
    """The last finished row of each case: a run the call's deadline cut short (``out_of_time``) or a failed case is
    no measurement of its protocol, and runs again in the next call."""
    return {(r["case"], r["card"]): r for r in run_rows(paths) if not r.get("out_of_time")}


def table(paths: list[str]) -> None:
    rows = [json.loads(line) for p in paths for line in open(p) if line.strip()]
    print("| case | card | steps | reached | recall [baseline] | learning AUC | beyond | GPU-s (shared) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "protocol" not in r:
            print(f"| {r['case']} | failed: {r.get('error')} |")
            continue
        print(f"| {r['case']} | {r['card']} | {r['steps']} | {r['reached'] or ('no (time)' if r['out_of_time'] else 'no')} | "
              f"{r['recall']:.3f} (raw {r['recall_raw']:.3f} [{r['recall_baseline']:.3f}]) | {r['recall_auc']} | "
              f"{r['recall_beyond']} | {r['wall_s']} |")


def csv_rows(protocol: str, paths: list[str], card: str | None = None, cases: set | None = None) -> list[list]:
    """One protocol's finished rows (of one kind of card, if named) as the rows of a results CSV for ``hlnas validate``
    (header first): the protocol's score as ``score``, beside the training setting's corrected recall (which says
    whether a run learned), its raw recall and no-recall baseline. The runs of one call share the GPU, so a candidate's
    GPU-seconds are the call's wall (its longest run) divided by the runs that shared it."""
    rows = [r for r in finished(paths).values() if r["protocol"] == protocol and card in (None, r["card"])
            and (cases is None or r["case"] in cases)]
    if not rows:
        raise SystemExit(f"screen.py: no finished rows of protocol {protocol!r}{f' on {card}' if card else ''} in "
                         f"{', '.join(paths)}")
    cost = gpu_seconds(paths)
    out = [["layout", "seed", "score", "recall", "recall_raw", "recall_baseline", "gpu_s_est", "device_name"]]
    out += [[r["layout"], r["seed"], r[r["score_metric"]], r["recall"], r["recall_raw"], r["recall_baseline"],
             round(cost[r["case"], r["card"]], 1), r["card"]] for r in rows]
    return out


def gpu_seconds(paths: list[str]) -> dict:
    """Each case's GPU-seconds on each card: a row's share of its call (the call's longest run over the runs that
    shared the card; rows from before calls were recorded group by seed and card), plus, for a run continued from a
    paused one (``resumed``), the shares of the paused parts before it. A part that was started over rather than
    continued is not the protocol's cost."""
    rows = run_rows(paths)
    groups: dict = {}
    for r in rows:
        groups.setdefault((r.get("call") or r["seed"], r["card"]), []).append(r)
    share = {id(r): max(x["wall_s"] for x in g) / len(g) for g in groups.values() for r in g}
    total: dict = {}
    for r in rows:  # in the order run: a fresh start resets the sum, a continuation adds to it
        key = (r["case"], r["card"])
        total[key] = (total.get(key, 0.0) if r.get("resumed") else 0.0) + share[id(r)]
    return total


def to_csv(protocol: str, paths: list[str]) -> None:
    """:func:`csv_rows` on stdout: ``hlnas validate --csv FILE --measure score``."""
    import csv

    csv.writer(sys.stdout).writerows(csv_rows(protocol, paths))


# The selection rule (README.md), as committed before the screen. Points 1-5 are judged on each card's run of the 21
# cells at 2 seeds; point 6 between two kinds of card.
RULE = {"rho_margin": 0.10, "partial_rho": 0.4, "saturated": 0.20, "seed_rho": 0.85, "gpu_s": 60.0, "cards_agree": 0.90,
        "control_raw": 0.9}
CELLS = 21
STATE_BAR = "paper-340m"  # the widths of the no-training bar printed beside the rule (Table 7's own scale is unstated)


def _validation(protocol: str, paths: list[str], card: str, cases: set | None = None):
    from hlnas.analysis.validate import validate
    from hlnas.analysis.validation_data import load_reference, proxy_from_rows

    header, *rows = csv_rows(protocol, paths, card, cases)
    # as text, the way hlnas validate reads its CSV, so both take one path
    rows = [{c: "" if x is None else str(x) for c, x in zip(header, row)} for row in rows]
    proxy = proxy_from_rows(header, rows, f"screen_{protocol}.csv", "score")
    return validate(proxy, load_reference("table7+transformer"), state_preset=STATE_BAR)


def best_reachable_margin(v, most_open: int = 4) -> float | None:
    """Point 1's margin (rho minus the share's, over the rule's 21 cells) at its best, whatever the cells not yet at
    2 seeds end up scoring: each takes the rank that helps most. None when more than ``most_open`` cells are open
    (the search grows as the cells' count to that power)."""
    import itertools

    from hlnas.analysis.paper import attention_share
    from hlnas.analysis.rankstats import spearman_rho
    from hlnas.analysis.validation_data import load_reference

    ref = {(m, r): x for (m, r, _), x in load_reference("table7+transformer").values.items()}
    done = {(c.mixer, c.ratio): c.value for c in v.shared if len(c.runs) >= 2}
    open_cells = [k for k in ref if k not in done]
    if len(open_cells) > most_open:
        return None
    cells = [*done, *open_cells]
    share = spearman_rho([attention_share(r) for _, r in cells], [ref[k] for k in cells])
    known = sorted(set(done.values()))
    slots = [known[0] - 1, *((a + b) / 2 for a, b in zip(known, known[1:])), known[-1] + 1]  # every rank between
    best = max(spearman_rho([*done.values(), *placed], [ref[k] for k in cells])
               for placed in itertools.product(slots, repeat=len(open_cells)))
    return best - share


def _outcomes(v) -> dict:
    """A card's outcome per cell: (every seed learned the training setting, the seeds' mean score), and the cell's
    seed spread (|seed 0 - seed 1|, None with one seed)."""
    from hlnas.analysis.validate import LEARNED

    out = {}
    for c in v.cells:
        vals = [r.value for r in c.runs]
        out[c.name] = (all((r.recall or 0) >= LEARNED for r in c.runs), c.value,
                       max(vals) - min(vals) if len(vals) > 1 else None)
    return out


def _control_point(card: str, runs: list, name: str = "control learns (raw, every seed)") -> tuple:
    """The all-attention control learns what is scored: raw recall >= RULE's control_raw in every run (None: no run)."""
    return (card, name, min((r.raw or 0) for r in runs) if runs else None, f">= {RULE['control_raw']}",
            None if not runs else all((r.raw or 0) >= RULE["control_raw"] for r in runs))


def _cost_point(card: str, v, name: str) -> tuple:
    """Point 5: mean GPU-seconds per candidate at most RULE's gpu_s."""
    mean = v.cost["mean"]
    return (card, name, mean, f"<= {RULE['gpu_s']}", None if mean is None else mean <= RULE["gpu_s"])


def rule(protocol: str, paths: list[str]) -> dict:
    """Each point of the selection rule for ``protocol`` over its finished rows: value, threshold, pass (None where
    not measured yet); the verdict ``chosen``, ``not chosen`` or ``incomplete``. Every point must pass, so one card's
    complete run that fails a point of 1-5, or an incomplete one whose point 1 no score of its open cells could pass,
    already decides ``not chosen`` (point 6 can only add a failure). Two cards agree on a cell when both or neither
    learned it in every seed, and their seed-mean scores differ by at most twice the seed spread (the median over the
    cells and both cards of |seed 0 - seed 1|)."""
    import statistics

    cards = sorted({card for (_, card), r in finished(paths).items() if r["protocol"] == protocol})
    if not cards:
        raise SystemExit(f"screen.py rule: no finished rows of protocol {protocol!r} in {', '.join(paths)}")
    points, complete, failed_on_a_card = [], True, False
    outcomes, bars = {}, []
    for card in cards:
        v = _validation(protocol, paths, card)
        outcomes[card] = _outcomes(v)
        bars.append((card, *state_bar(v)))
        seeds = v.seeds
        full = len(v.shared) == CELLS and len(seeds["seeds"]) >= 2 and all(len(c.runs) >= 2 for c in v.shared)
        complete &= full
        control = [r for c in v.cells if c.mixer == "transformer" for r in c.runs]
        margin = None if v.proxy_rho.rho is None or v.share_rho.rho is None else v.proxy_rho.rho - v.share_rho.rho
        cons = seeds["consistency"]
        card_points = [
            (card, "cells x seeds", f"{len(v.shared)} x {len(seeds['seeds'])}", f"{CELLS} x 2", full),
            _control_point(card, control),
            (card, "1. rho minus the share's", margin, f">= {RULE['rho_margin']}",
             None if margin is None else margin >= RULE["rho_margin"]),
            (card, "2. partial rho", v.partial_rho.rho, f">= {RULE['partial_rho']}",
             None if v.partial_rho.rho is None else v.partial_rho.rho >= RULE["partial_rho"]),
            (card, "3. saturated cells", v.saturation["fraction"], f"<= {RULE['saturated']}",
             v.saturation["fraction"] <= RULE["saturated"]),
            (card, "4. seed rho; split cells", f"{cons if cons is None else round(cons, 3)}; {len(seeds['split'])}",
             f">= {RULE['seed_rho']}; 0", None if cons is None else cons >= RULE["seed_rho"] and not seeds["split"]),
            _cost_point(card, v, "5. GPU-s per candidate"),
        ]
        if full:
            failed_on_a_card |= any(ok is False for *_, ok in card_points[1:])
        else:  # point 1 may already be out of reach, whatever the open cells score
            best = best_reachable_margin(v)
            reachable = None if best is None else best >= RULE["rho_margin"]
            card_points.append((card, "1. at best, open cells any score", best, f">= {RULE['rho_margin']}", reachable))
            failed_on_a_card |= reachable is False
        points += card_points
    if len(cards) >= 2:
        a, b = outcomes[cards[0]], outcomes[cards[1]]
        both = sorted(set(a) & set(b))
        spreads = [o[2] for o in (*a.values(), *b.values()) if o[2] is not None]
        spread = statistics.median(spreads) if spreads else 0.0
        agree = [a[c][0] == b[c][0] and abs(a[c][1] - b[c][1]) <= 2 * spread for c in both]
        frac = sum(agree) / len(agree) if agree else None
        points.append((" / ".join(cards), f"6. cells agreeing (|diff| <= {2 * spread:.3f})", frac,
                       f">= {RULE['cards_agree']}", None if frac is None else frac >= RULE["cards_agree"]))
    else:
        complete = False
        points.append(("one card", "6. cells agreeing between two cards", None, f">= {RULE['cards_agree']}", None))
    # choosing needs every cell at 2 seeds on two kinds of card; refusing needs one card's complete run to fail
    if failed_on_a_card or (complete and not all(ok for *_, ok in points)):
        verdict = "not chosen"
    else:
        verdict = "chosen" if complete else "incomplete"
    return {"protocol": protocol, "points": points, "verdict": verdict, "bars": bars}


def state_bar(v) -> tuple[int, float | None, float | None]:
    """Beside the rule, not in it: (cells, rho, share's rho) over the validation's shared cells for the predictor that
    trains nothing and ranks by the attention share, then the recurrent-state bytes at STATE_BAR's widths (``hlnas
    validate --state-bar``). A proxy below it learned no more than the cost model already knows."""
    return len(v.shared), v.state_rho.rho, v.share_rho.rho


def subset_rule(protocol: str, paths: list[str]) -> dict:
    """The subset screen's rule (README) for ``protocol`` on each card with its 10 subset cases finished: the control
    learns (raw >= 0.9), every hybrid learns (corrected recall at the training setting >= 0.5), the mean within-ratio
    Kendall tau of the mixer order against Table 7 is above 0, pure DeltaNet scores below its 3:1 hybrid, and the
    cost is at most point 5's. The verdict ``goes on``, ``stops``, or ``incomplete``."""
    from hlnas.analysis.validate import LEARNED

    subset = set(plan("subset", protocol, 0, []))  # seed 0's cases
    cards = sorted({card for (case, card), r in finished(paths).items() if case in subset})
    if not cards:
        raise SystemExit(f"screen.py subset: no finished subset rows of protocol {protocol!r} in {', '.join(paths)}")
    points, verdicts, bars = [], [], []
    for card in cards:
        v = _validation(protocol, paths, card, subset)
        bars.append((card, *state_bar(v)))
        cell = {(c.mixer, c.ratio): c for c in v.cells}
        hybrids = [r for (m, q), c in cell.items() if q in ("3:1", "6:1") for r in c.runs]
        control = cell.get(("transformer", "full"))
        pure, partner = cell.get(("deltanet", "pure")), cell.get(("deltanet", "3:1"))
        tau = v.within_ratio["mean"]
        n_cases = len(hybrids) + (control is not None) + (pure is not None)
        card_points = [
            (card, "cases", n_cases, "10", n_cases == 10),
            _control_point(card, list(control.runs) if control else [], "control learns (raw)"),
            (card, "every hybrid learns (corrected, training setting)", min((r.recall or 0) for r in hybrids) if hybrids
             else None, f">= {LEARNED}", None if len(hybrids) < 8 else all((r.recall or 0) >= LEARNED for r in hybrids)),
            (card, "within-ratio Kendall tau, mean", tau, "> 0", None if tau is None else tau > 0),
            (card, "pure DeltaNet minus its 3:1", None if not (pure and partner) else pure.value - partner.value, "< 0",
             None if not (pure and partner) else pure.value < partner.value),
            _cost_point(card, v, "GPU-s per candidate"),
        ]
        points += card_points
        oks = [ok for *_, ok in card_points[1:]]
        verdicts.append("stops" if False in oks else "goes on" if n_cases == 10 and all(oks) else "incomplete")
    verdict = "stops" if "stops" in verdicts else "goes on" if "goes on" in verdicts else "incomplete"
    return {"protocol": protocol, "points": points, "verdict": verdict, "bars": bars}


def print_rule(protocol: str, paths: list[str], which=rule) -> None:
    got = which(protocol, paths)
    print("| card | point | value | needs | passes |\n|---|---|---|---|---|")
    for card, name, value, need, ok in got["points"]:
        shown = f"{value:.3f}" if isinstance(value, float) else ("-" if value is None else value)
        print(f"| {card} | {name} | {shown} | {need} | {'-' if ok is None else 'yes' if ok else 'no'} |")
    for card, n, rho, share in got.get("bars", []):  # beside the rule, not in it
        if rho is not None:
            print(f"\nbar beside the rule ({card}, {n} cells): share then state bytes ({STATE_BAR}) rho {rho:+.3f}, "
                  f"the share alone {share:+.3f}")
    print(f"\n{protocol}: {got['verdict']}")


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "run":
        drive(sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), sys.argv[5:])
    elif cmd == "work":
        work(sys.argv[2], float(sys.argv[3]), sys.argv[4:])
    elif cmd == "plan":
        print(" ".join(plan(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5:])))
    elif cmd == "table":
        table(sys.argv[2:])
    elif cmd == "csv" and len(sys.argv) > 3:
        to_csv(sys.argv[2], sys.argv[3:])
    elif cmd == "rule" and len(sys.argv) > 3:
        print_rule(sys.argv[2], sys.argv[3:])
    elif cmd == "subset" and len(sys.argv) > 3:
        print_rule(sys.argv[2], sys.argv[3:], subset_rule)
    else:
        sys.exit(__doc__)
