"""The delta-rule probe's sweep rows -> does a narrower key state or a harder K separate pure from 3:1? (#20 point 2)

    python -m experiments.paper_grid.delta_probe experiments/results/delta_probe_h200_<date>/*/recall_sweep.jsonl \
        --out experiments/results/delta_probe_h200_<date>/probe.md

Reads ``experiments/recall_sweep.py``'s rows (one JSON object a case) of ``delta_capacity_keys.json`` and
``delta_capacity_size.json`` and pairs each mixer's pure model with its 3:1 hybrid at the same setting (the case's
``tag`` less its ``pure`` / ``3:1`` word). Per setting and seed it prints raw recall beside the no-recall baseline,
the corrected recall and ``auc`` (the area under the corrected validation curve over the step budget), then asks
``hlnas calibrate``'s question of both measures: is the pure model below its hybrid in every seed, the means apart by
more than twice the larger seed spread (:func:`hlnas.calibration.outlook.pure_below`)? ``yes``, ``no``, or
``reversed`` where the hybrid sits below the pure model by the same rule, ``no control`` where the rows'
all-attention control at the same width and task (``d64 K64 L256`` in the tag) learned in no seed. A case its time
budget cut short, or that paused (``--state``: a probe spread over device calls) and was not continued, says so:
its later checks count 0 in the sweep's ``auc``, so in a pair with a cut run final recall is ``undecided`` (runs cut
after different step counts) and ``auc`` is compared over the steps every run of the pair covers.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from experiments.paper_grid.compare import LEARNED, SPREAD_FLOOR
from hlnas.calibration.outlook import pure_below
from hlnas.metrics import corrected

ROLE = re.compile(r"\b(pure|3:1)\s*")


def read_rows(paths: list[Path]) -> list[dict]:
    """Every row of the given JSONL files; a later row of the same case (tag and seed) replaces an earlier one."""
    rows: dict[tuple, dict] = {}
    for path in paths:
        try:
            lines = path.read_text().splitlines()
        except OSError as e:
            raise SystemExit(f"delta_probe: cannot read {path}: {e.strerror}") from None
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                raise SystemExit(f"delta_probe: {path} line {n} is not JSON: {e.msg}") from None
            rows[(r.get("tag") or r["layout"], r.get("seed", 0))] = r
    return list(rows.values())


def settings(rows: list[dict]) -> dict[str, dict[str, dict[int, dict]]]:
    """``setting -> role -> seed -> row``: role ``pure`` or ``3:1`` from the tag (a control's rows: ``control``)."""
    out: dict[str, dict[str, dict[int, dict]]] = {}
    for r in rows:
        tag = r.get("tag") or r["layout"]
        m = ROLE.search(tag)
        role, setting = (m.group(1), ROLE.sub("", tag, count=1).replace(" ,", ",").strip()) if m else ("control", tag)
        out.setdefault(setting, {}).setdefault(role, {})[int(r.get("seed", 0))] = r
    return out


def cut_at(r: dict) -> int | None:
    """The steps after which a run was stopped short of its budget without reaching its target: by the time budget
    (``cut_at``) or paused and never continued (a ``paused`` row, its ``steps``); None for a run that finished."""
    if r.get("cut_at"):
        return int(r["cut_at"])
    return int(r["steps"]) if r.get("status") == "paused" and r.get("steps") else None


def scored(r: dict) -> bool:
    """Whether a row has a recall to read: a finished run, or one paused with its checks so far."""
    return r.get("status") in ("ok", "paused") and r.get("acc") is not None


def measures(r: dict, until: int | None = None) -> dict:
    """Corrected final recall and ``auc``; with ``until``, ``auc`` over the run's first ``until`` steps instead (from
    its stored checks, a run stopped at the target held there: hlnas.recall.proxy.learning_auc)."""
    from hlnas.recall.proxy import learning_auc

    ok = scored(r)
    auc = r.get("auc") if ok else None
    if ok and until is not None and r.get("curve"):
        auc = learning_auc(r["curve"], until, r["baseline"], r.get("steps_to_target") is not None)
    return {"recall": corrected(r["acc"], r["baseline"]) if ok else None, "auc": auc}


def common_steps(runs: list[dict]) -> int | None:
    """The steps every scored run of a pair covers where some were cut by the time budget (a run that stopped at its
    target covers any number: it holds its value); None where none was cut."""
    cut = [c for r in runs if (c := cut_at(r))]
    return min(cut) if cut else None


def verdict(pure: dict[int, dict], hyb: dict[int, dict], measure: str) -> tuple[str, str]:
    """``yes`` (pure below its hybrid by the calibration's rule), ``reversed`` (the hybrid below the pure model by
    it), ``no``, or ``undecided`` with fewer than two seeds of each scored on ``measure``."""
    until = common_steps([*pure.values(), *hyb.values()])
    if until is not None and measure == "recall":  # final recall after different step counts compares nothing
        return "undecided", f"runs cut short (time budget or paused), the first at {until} steps"
    p = {s: v for s, r in pure.items() if (v := measures(r, until)[measure]) is not None}
    h = {s: v for s, r in hyb.items() if (v := measures(r, until)[measure]) is not None}
    if min(len(p), len(h)) < 2:
        return "undecided", f"{len(p)} pure and {len(h)} hybrid seeds scored"
    below, gap, need = pure_below(p, h, SPREAD_FLOOR)
    above, _, _ = pure_below(h, p, SPREAD_FLOOR)
    answer = "yes" if below else ("reversed" if above else "no")
    over = "" if until is None else f", over the first {until} steps: runs cut short"
    return answer, f"hybrid - pure {gap:+.3f} vs twice the spread {need:.3f}{over}"


def _run_text(r: dict) -> str:
    if not scored(r):  # the first error's first line (replicas fail first)
        errors = (e for e in (r.get("replicas_error"), r.get("error")) if e)
        why = next((line for e in errors for line in e.splitlines() if line), "")
        return f"{r.get('status', 'failed')}: {why[:80].replace('|', '/')}"
    m = measures(r)
    steps = r.get("steps_to_target") or "-"
    cut = (f", cut at {r['cut_at']}" if r.get("cut_at") else
           f", paused at {r['steps']}" if r.get("status") == "paused" else "")
    return f"{r['acc']:.3f} [{r['baseline']:.3f}] -> {m['recall']:.3f}, auc {m['auc']:.3f}, {steps}{cut}"


SHAPE = re.compile(r"\bd\d+ K\d+ L\d+\b")  # a tag's recall-model width and task: "d64 K64 L256"


def failed_controls(groups: dict[str, dict[str, dict[int, dict]]]) -> dict[str, str]:
    """``shape -> why`` for each all-attention control in the rows that learned in no seed: a pair at that shape has no
    passing control, so its verdicts are no result (the project's rule: a protocol's control must learn it first)."""
    out = {}
    for setting, roles in groups.items():
        runs = roles.get("control", {})
        shape = SHAPE.search(setting)
        if runs and shape and not any((measures(r)["recall"] or 0) >= LEARNED for r in runs.values()):
            raws = " / ".join(f"{r['acc']:.3f}" if r.get("acc") is not None else "failed" for r in runs.values())
            out[shape.group(0)] = f"its control learned in 0 of {len(runs)} seeds ({raws} raw)"
    return out


def report(rows: list[dict], source: str) -> str:
    """The probe's table: a line per setting and role, its seeds side by side, then the two verdicts per setting."""
    lines = ["# The delta-rule probe: pure vs 3:1 (issue #20 point 2)", "",
             f"Rows: {source}. Each run: raw recall [no-recall baseline] -> corrected, auc (area under the corrected "
             "validation curve over the step budget), steps to the stop (`-`: not reached). A verdict `yes` is the "
             "calibration's \"pure below its hybrid\": every seed, and the means apart by more than twice the larger "
             "seed spread; `reversed` is the hybrid below the pure model by the same rule; `no control`: the rows' "
             "all-attention control at that width and task learned in no seed, so the pair is no result.", "",
             "| setting | role | seeds | recall: pure below 3:1? | auc: pure below 3:1? |", "|---|---|---|---|---|"]
    groups = settings(rows)
    no_control = failed_controls(groups)
    for setting, roles in groups.items():
        pair = "pure" in roles and "3:1" in roles
        verdicts = [verdict(roles["pure"], roles["3:1"], m) for m in ("recall", "auc")] if pair else None
        shape = SHAPE.search(setting)
        if verdicts and shape and shape.group(0) in no_control:  # not a result, whatever the pair did
            verdicts = [("no control", no_control[shape.group(0)])] * 2
        for i, role in enumerate(r for r in ("control", "pure", "3:1") if r in roles):
            runs = roles[role]
            learned = sum((measures(r)["recall"] or 0) >= LEARNED for r in runs.values())
            each = " / ".join(f"s{s}: {_run_text(r)}" for s, r in sorted(runs.items()))
            seeds = f"learned {learned}/{len(runs)}: {each}"
            cells = (["", ""] if not verdicts or i else [f"**{a}** ({why})" for a, why in verdicts])
            lines.append(f"| {setting if i == 0 else ''} | {role} | {seeds} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("rows", nargs="+", type=Path, help="recall_sweep.jsonl files")
    p.add_argument("--out", type=Path, help="write the markdown here too")
    args = p.parse_args(argv)
    text = report(read_rows(args.rows), ", ".join(str(x) for x in args.rows))
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
