"""A calibration verdict (:func:`hlnas.calibration.protocol.verdict`) as text: the table ``hlnas calibrate`` and ``hlnas search``
print, its cells for the report and the dashboard, the per-mixer and per-hop lines under it, and the advice on what to
change when it failed."""

from __future__ import annotations

__all__ = ["TABLE_COLUMNS", "table_cells", "summary", "format_table", "hop_lines", "mixer_lines", "advice",
           "missing_seeds"]

TABLE_COLUMNS = ("role", "mixer", "layout", "recall per seed", "mean", "seed spread", "no-recall", "verdict")


def table_cells(result: dict) -> list[tuple[str, ...]]:
    """The verdict's rows as text cells under :data:`TABLE_COLUMNS`: what the CLI, the report and the dashboard show."""
    def num(x) -> str:
        return "-" if x is None else f"{x:.3f}"

    return [(r["role"], r["mixer"], r["layout"], ", ".join(f"{v:.3f}" for v in r["recall"]) or "-", num(r["mean"]),
             num(r["spread"]), num(r["baseline"]), r.get("verdict", "-")) for r in result["rows"]]


def summary(result: dict) -> str:
    """'valid', or 'INVALID: ' and what failed."""
    return "valid" if result["valid"] else "INVALID: " + "; ".join(result["failures"])


def format_table(result: dict, partial: str | None = None) -> str:
    """The verdict as a plain-text table (what ``hlnas calibrate`` and ``hlnas search`` print). ``partial``: the
    verdict of a calibration still running, so this line replaces the 'valid' line (``hlnas status``)."""
    widths = (8, 15, 26, 22, 6, 11, 9, 8)
    right = {4, 5, 6, 7}

    def line(cells) -> str:
        return " ".join(f"{c[:w]:>{w}}" if i in right else f"{c[:w]:<{w}}" for i, (c, w) in enumerate(zip(cells, widths)))

    lines = [line(TABLE_COLUMNS), *(line(cells) for cells in table_cells(result))]
    cfg = result["config"]
    lines.append(partial or (
                 f"valid: {'yes' if result['valid'] else 'NO'} (control >= {cfg['control_min']} at the training length; "
                 f"every pure model and {cfg['hybrid_ratio']} hybrid more than 2x its seed spread from its no-recall "
                 "baseline or from its partner)"))
    lines += mixer_lines(result)
    lines += hop_lines(result)
    return "\n".join(lines)


def hop_lines(result: dict) -> list[str]:
    """VT protocols: each row's mean test accuracy by hops of the query (a query h hops from its value needs h + 1
    lookups), the strongest no-recall baseline of those queries in brackets; [] where no run stores the split."""
    rows = [r for r in result["rows"] if r.get("by_hop")]
    if not rows:
        return []
    hops = sorted({h for r in rows for h in r["by_hop"]}, key=int)
    lines = ["test accuracy by hops of the query (h hops: h + 1 lookups; mean over seeds, [no-recall baseline]):",
             f"  {'layout':<26} " + " ".join(f"{'h=' + h:>14}" for h in hops)]
    for r in rows:
        cells = [f"{r['by_hop'][h]['acc']:.3f} [{r['by_hop'][h]['baseline']:.3f}]" if h in r["by_hop"] else "-"
                 for h in hops]
        lines.append(f"  {r['layout'][:26]:<26} " + " ".join(f"{c:>14}" for c in cells))
    return lines


def mixer_lines(result: dict) -> list[str]:
    """The per-mixer checks as text: pure below its hybrid beyond the spread, and the graded ladder."""
    cfg, mixers = result["config"], result.get("mixers") or {}
    lines = []
    below = {m: c for m, c in mixers.items() if c.get("pure_below") is not None}
    if below:
        need = cfg.get("pure_below_min_mixers", 0)
        lines.append(f"pure below its hybrid in every seed, beyond 2x the seed spread ({sum(map(bool, (c['pure_below'] for c in below.values())))}"
                     f" mixers{f', need {need}' if need else ''}): "
                     + ", ".join(f"{m} {'yes' if c['pure_below'] else 'no'} ({c['pure_below_gap']:+.3f})" for m, c in below.items()))
    graded = {m: c for m, c in mixers.items() if c.get("graded")}
    if graded:
        need = cfg.get("graded_min_mixers", 0)
        lines.append(f"graded measure vs attention share ({sum(c['graded'] == 'rises' for c in graded.values())} rise"
                     f"{f', need {need}' if need else ''}; mean ± half the seed spread per ratio):")
        for m, c in graded.items():
            steps = " -> ".join(f"{p['ratio']} {p['mean']:.3f}±{p['spread'] / 2:.3f}" for p in c["ladder"])
            falls = "; falls " + ", ".join(f"{f['from']}->{f['to']} by {f['by']:.3f}" for f in c["falls"]) if c["falls"] else ""
            lines.append(f"  {m}: {c['graded']} ({steps}){falls}")
    return lines


def advice(space, result: dict) -> str:
    """Which settings to change, for the kinds of failure in ``result``."""
    sc = space.score
    objectives = sc.objectives
    if "mqar" in objectives and "mqar_mixed" not in objectives and "ruler" not in objectives:
        mq = sc.mqar
        size = (f"score.mqar.vt.chains (now {mq.vt.chains}), score.mqar.vt.hops (now {mq.vt.to_dict()['hops']})"
                if mq.task == "vt" else f"score.mqar.kv_pairs (now {mq.kv_pairs})")
        knobs = (f"score.mqar.steps (now {mq.steps}), score.mqar.lrs (now {list(mq.lrs) or [mq.lr]}), "
                 f"{size} and score.mqar.seq_len (now {mq.seq_len}), "
                 f"score.mqar.model (the recall model's width, now {mq.model or 'the candidate'})")
    elif "mqar_mixed" in objectives:
        tc = space.train
        knobs = (f"train.tokens (now {tc.tokens}), train.lr (now {tc.lr}), train.recall_count (now {tc.recall_count}), "
                 f"train.recall_kv_pairs (now {tc.recall_kv_pairs})")
    else:
        knobs = "train.tokens, train.recall_every and score.ruler.lengths"
    tips = []
    # a stop is a failed control's unless a certain separation or pure_below failure stopped it
    decided = {"pure_below", "separation"} & set(result["kinds"])
    if "control" in result["kinds"] or ("stopped" in result["kinds"] and not decided):
        tips.append("to let the all-attention control learn: train longer or sweep learning rates, or make the task "
                    f"easier ({'fewer chains or hops' if 'vt.hops' in knobs else 'fewer pairs'}, shorter sequences): {knobs}")
        chain = _chaining_tip(space, result)
        if chain:
            tips.append(chain)
    if "separation" in result["kinds"]:
        tips.append("to separate the candidates: a harder task (more pairs than a fixed-size state holds) or more training")
    if "pure_below" in result["kinds"] or "graded" in result["kinds"]:
        tips.append("to grade by attention share: a harder task (more pairs, or a narrower recall model: "
                    "score.mqar.model.d_model) so pure models fail, or a smaller step budget (score.mqar.steps) so "
                    "the steps to learn differ")
    if "missing" in result["kinds"]:
        tips.append("fix the failed runs (their errors are in the table)")
    return "; ".join(tips)


def _chaining_tip(space, result: dict) -> str | None:
    """For a VT protocol whose control learned its 0-hop queries and failed a longer chain: the attention-input conv's
    split2 start, unless the space has it. Why: with shift2 the 24-layer control learned every 0-hop query and no 1-hop
    one on a GPU, and split2 let 4 attention layers learn 2-hop queries on the CPU (hlnas.model.mixers.attention)."""
    mq = space.score.mqar
    control = next((r for r in result.get("rows", []) if r["role"] == "control"), None)
    hops = (control or {}).get("by_hop") or {}
    if mq.task != "vt" or "0" not in hops:
        return None
    need = space.calibration.control_min
    short = [(h, v) for h, v in hops.items() if h != "0" and v["acc"] < need]
    attention = dict((mq.model or {}).get("mixer_hparams", {}).get("attention", {}))
    if hops["0"]["acc"] < need or not short or attention.get("input_conv_init") == "split2":
        return None
    h, v = short[0]
    return (f"the control learned the 0-hop queries ({hops['0']['acc']:.3f}) and not the {h}-hop ones "
            f"({v['acc']:.3f} [{v['baseline']:.3f}]): its attention does one lookup and does not chain them; start the "
            "attention-input conv as split2 (score.mqar.model.mixer_hparams.attention: {input_conv: 4, "
            f"input_conv_init: split2}}, now {attention or 'no conv'})")


def missing_seeds(name: str, row: dict, seeds: int) -> str:
    """Why a verdict row has fewer than ``seeds`` seeds scored: its runs that failed, and its seeds with no stored run
    (a stopped or unfinished calibration never trained them, which is not a failure of the layout)."""
    failed = {int(k.rsplit(":s", 1)[1]) for k in row["failed_runs"]}
    untrained = sorted(set(range(seeds)) - set(row["seeds"]) - failed)
    why = "; ".join(([f"failed: {', '.join(row['failed_runs'])}"] if failed else [])
                    + ([f"never trained: seed {', '.join(map(str, untrained))}"] if untrained else []))
    return f"{name} has {len(row['recall'])} of {seeds} seeds scored ({why})"
