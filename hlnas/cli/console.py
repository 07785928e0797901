"""What ``hlnas`` prints on a terminal: the live lines and progress bar of a search or calibration, the Pareto
front table, a stored study's status, a layout's cost card, the sampler benchmark's lines, and the number and
byte formats they share. Functions return text (the command line prints it); only :class:`SearchProgress`
writes, to stderr, as events arrive. Nothing here imports torch.
"""

from __future__ import annotations

import json
import shlex
import sys

from hlnas.metrics import bytes_text

__all__ = ["SearchProgress", "command", "interrupted_text", "stored_text", "train_summary", "format_bytes", "format_value", "recall_text", "front_table", "status_text",
           "layout_card", "layout_record", "bench_run_line", "bench_summary"]


def command(*argv) -> str:
    """An ``hlnas`` command line to print, each argument quoted for a POSIX shell (a study name with a space or a
    quote is pasted back as one argument)."""
    return shlex.join(["hlnas", *map(str, argv)])


def interrupted_text(stored: bool | None, storage: str, name: str) -> str:
    """What ``hlnas search`` prints when stopped (Ctrl-C, SIGTERM); ``stored``: :func:`hlnas.search.storage.resumable`."""
    resume = command("search", "--resume", "--storage", storage, "--study", name)
    if stored:
        return f"\ninterrupted; completed trials are stored. Resume with:\n  {resume}"
    if stored is None:
        return (f"\ninterrupted; {storage} could not be read to check what was stored. If study {name!r} is there, "
                f"resume with:\n  {resume}\nelse run the same command again")
    return f"\ninterrupted before study {name!r} was stored in {storage}: nothing was kept. The same command starts it afresh"


def stored_text(storage: str, name: str) -> str:
    """What ``hlnas search`` prints last: where the study is, and the commands that read it."""
    return (f"\nstudy {name!r} stored in {storage}\n  {command('status', '--storage', storage, '--study', name)}\n"
            f"  {command('dashboard', '--storage', storage)}")


def format_bytes(n: int) -> str:
    """'64.00 MiB (67,108,864 B)': the largest binary unit it reaches, with the exact count."""
    return bytes_text(n, exact=True)


def format_value(x) -> str:
    """A score to 3 decimals, '-' when there is none."""
    return "-" if x is None else f"{x:.3f}"


def recall_text(m: dict) -> str:
    """'recall 0.84 (raw 0.88, no-recall 0.25)': the corrected value the search optimises, with its parts."""
    if m.get("recall_raw") is None:
        return f"recall {format_value(m.get('recall'))}"
    return (f"recall {format_value(m.get('recall'))} (raw {format_value(m.get('recall_raw'))}, "
            f"no-recall {format_value(m.get('recall_baseline'))})")


#: the events :meth:`SearchProgress.event` prints as one line of their data
_LINES = {
    "reused": "  trial {number:>3} reused    {layout} (same layout as trial {from})",
    "infeasible": "  trial {number:>3} skipped   {layout}: {error}",
    "longest_first": "  the target ({target} layouts) covers the {n} untried candidates: each is trained whatever is proposed, "
                     "so they start longest expected first",
}


class SearchProgress:
    """Progress bar over trained trials plus a line per finished trial and the front when it changes; pass
    :meth:`event` as ``on_event`` of :func:`hlnas.search.study.run_search`. Calibration runs print a line each."""

    def __init__(self, total: int, progress: bool):
        self.bar = None
        self._total, self._progress = total, progress
        self.failed = 0

    def _start_bar(self) -> None:
        """At the first event, not before: an error in the options or the storage prints without a bar."""
        if self._progress and self.bar is None:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=self._total, unit="trial", desc="search", dynamic_ncols=True, file=sys.stderr)

    def write(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr, flush=True)

    def _finished(self, data: dict) -> None:
        m = data.get("metrics") or {}
        if data["status"] == "ok":
            self.write(f"  trial {data['number']:>3} done      {data['layout']}  {recall_text(m)}  "
                       f"KV {m.get('kv_cache_bytes', 0) / 2**20:.1f} MiB  val_loss {m.get('val_loss', float('nan')):.3f}  "
                       f"({m.get('train_wall_s', 0):.0f}s train)")
            if self.bar is not None:
                self.bar.update(1)
        else:
            self.failed += 1
            err = (data.get("error") or "").strip().splitlines()
            self.write(f"  trial {data['number']:>3} {data['status']:<9} {data['layout']}  {m.get('error_kind')}: {err[0] if err else ''}")
        if self.bar is not None:
            self.bar.set_postfix(failed=self.failed, refresh=True)

    def event(self, kind: str, data: dict) -> None:
        self._start_bar()
        if kind in _LINES:
            self.write(_LINES[kind].format(**data))
        elif kind == "started":
            taken = f"  (recall: calibration run {data['recall_from']}; LM half only)" if data.get("recall_from") else ""
            self.write(f"  trial {data['number']:>3} started   {data['layout']}{taken}")
        elif kind == "finished":
            self._finished(data)
        elif kind == "adopted":  # a --results-from study's result: counts like a trained trial
            self.write(f"  trial {data['number']:>3} adopted   {data['layout']} (measured as {data['from']}; nothing trained)")
            if self.bar is not None:
                self.bar.update(1)
        elif kind == "trained":  # layouts trained before the loop (a resume, calibration's seed-0 runs) count too
            if self.bar is not None:
                self.bar.total = max(self.bar.total or 0, data["of"])
                self.bar.n = data["n"]
                self.bar.refresh()
        elif kind == "front":
            rows = data["rows"]
            shown = ", ".join(f"{r['layout']} (recall {format_value(r['recall'])}, KV {(r['kv_cache_bytes'] or 0) / 2**20:.1f} MiB)"
                              for r in rows[:5])
            self.write(f"  front now {len(rows)}: {shown}{' ...' if len(rows) > 5 else ''}")
        elif kind == "retry":
            self.write(f"  retrying {data['layout']} (trial {data['number']} failed: {data['error_kind']})")
        elif kind == "time_limit":
            self.write(f"  time limit of {data['seconds']:.0f}s reached with {data['trained']} trained; resume to continue")
        elif kind == "paused":
            self.write(f"  #{data['number']:<4} {data['layout']:<28} paused at recall step {data.get('steps')} (time limit; "
                       "--resume continues it)")
        elif kind == "requeued":
            if data.get("why"):
                self.write(f"  re-queued {data['layout']}: {data['why']}")
            else:
                self.write(f"  re-queued {data['n']} trial(s) left running by an earlier process")
        elif kind == "target_raised":
            why = (f"retrying {data['retried']} failed layout(s)" if "retried" in data
                   else f"running the {data['requeued']} re-queued layout(s)")
            self.write(f"  {why}: the trial target rises from {data['from']} to {data['to']}")
        elif kind == "calibration_kept":
            self.write(f"calibration: skipped, as when study {data['study']!r} was started (--skip-calibration); its recall "
                       "stays unvalidated. To calibrate it: "
                       + command("search", "--resume", "--storage", data["storage"], "--study", data["study"], "--calibrate"))
        elif kind == "calibration_started":
            self.write(f"calibration: {data['n']} control runs (all-attention, each mixer pure and hybrid, per seed)"
                       + (f"; {data['reused']} stored runs reused" if data["reused"] else ""))
        elif kind == "calibration_run_started":
            self.write(f"  control {data['key']:<28} started   {data['layout']}")
        elif kind == "calibration_run":
            raw, base = data.get("raw_train_length"), data.get("baseline_train_length")
            if data["status"] == "ok" and raw is not None:
                self.write(f"  control {data['key']:<28} done      {data['layout']}  recall {raw:.3f} (no-recall baseline "
                           f"{base:.3f})")
            else:
                self.write(f"  control {data['key']:<28} {data['status']:<9} {data['layout']}  {data.get('error_kind')}: "
                           f"{(data.get('error') or '').strip().splitlines()[0] if data.get('error') else ''}")
        elif kind == "calibration_run_paused":
            self.write(f"  control {data['key']:<28} paused    at step {data.get('steps')} (out of time; the next run of the study on this machine continues it)")
        elif kind == "calibration_hopeless":
            self.write(f"calibration: {data['reason']}, so it cannot pass: {data['skipped']} runs not started"
                       + (f", {data['running']} running finish first" if data["running"] else ""))
        elif kind == "calibration_paused":
            self.write(f"calibration: out of time with {data['done']} of {data['total']} runs stored, {data['paused']} "
                       "paused; run the same command again to continue (on this machine: paused runs are kept here only)")
        elif kind == "calibration":
            from hlnas.calibration.protocol import format_table

            head = "calibration (stored with the study, reused):" if data.get("reused") else "calibration:"
            if data.get("borrowed_from"):
                head = f"calibration of study '{data['borrowed_from']}' (the same recall protocol, --calibrated-by):"
            self.write(head + "\n" + format_table(data))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def front_table(rows: list[dict], calibration: dict | None) -> str:
    """The Pareto front (rows of :func:`hlnas.search.study.front_rows`) as a table, with a note when the study's
    ``calibration`` (its ``hlnas_calibration`` attr) did not validate the recall numbers."""
    if not rows:
        return "no completed trials yet"
    base = next((r.get("recall_baseline") for r in rows if r.get("recall_baseline") is not None), None)
    lines = ["\nPareto front (feasible completed trials). recall = (raw - b) / (1 - b), clipped at 0, with b the strongest "
             "no-recall baseline on the same test instances" + (f" (b = {base:.3f}, {rows[0].get('recall_baseline_name')})"
                                                               if base is not None else "") + ":",
             f"  {'#':>4}  {'layout':<26} {'ratio':<11} {'recall':>7} {'raw':>7} {'no-rec.':>7} {'KV cache':>12} "
             f"{'val_loss':>9} {'params':>12}"]
    # the graded measure, where the study optimises it (recall_auc): the front is non-dominated in it, not in recall
    auc = any(r.get("recall_auc") is not None for r in rows)
    if auc:
        lines[0] = lines[0][:-1] + "; recall_auc, the study's objective, the baseline-corrected area under its validation curve:"
        lines[1] += f" {'recall_auc':>10}"
    for r in rows:
        kv = bytes_text(r["kv_cache_bytes"] or 0)
        lines.append(f"  {r['number']:>4}  {r['layout']:<26} {r['ratio']:<11} {format_value(r['recall']):>7} "
                     f"{format_value(r.get('recall_raw')):>7} {format_value(r.get('recall_baseline')):>7} {kv:>12} "
                     f"{format_value(r['val_loss']):>9} {r['params'] or 0:>12,}"
                     + (f" {format_value(r.get('recall_auc')):>10}" if auc else "")
                     + (f"  (result of {r['result_from']})" if r.get("result_from") else ""))  # adopted, not trained here
    # what ran on the PyTorch kernels where fla was asked for (mqar.kernel_fallbacks): same numbers, not fla's seconds
    slow = [r for r in rows if r.get("kernel_fallbacks")]
    if slow:
        lines.append(f"  ({len(slow)} of these trials ran ops on the PyTorch kernels instead of fla: their recall stands, "
                     f"their seconds are not fla's)")
        lines += [f"    - {f}" for f in sorted({f for r in slow for f in r["kernel_fallbacks"]})]
    status = (calibration or {}).get("status")
    if status in ("skipped", "disabled", None):
        lines.append(f"  (calibration {status or 'not run'}: these recall numbers were not validated by the protocol's controls)")
    elif status in ("running", "invalid", "closed"):
        lines.append(f"  (calibration {status}: these recall numbers are not validated by the protocol's controls"
                     + (" yet)" if status == "running" else ")"))
    return "\n".join(lines)


def status_text(summary: dict) -> str:
    """``hlnas status``: trial counts (the complete ones split into trained and adopted where any were adopted),
    objectives, the calibration and the front of :func:`hlnas.search.study.study_summary`'s record."""
    target = f" (target {summary['target']} trials)" if summary.get("target") else ""  # what a resumed search runs to
    org = summary.get("origins") or {}
    origins = (f" ({org['trained']} trained, {org['adopted']} adopted from {', '.join(org['adopted_from'])})"
               if org.get("adopted") else "")  # --results-from: how many complete trials are other studies' results
    lines = [f"study '{summary['study']}': " + ", ".join(f"{v} {k}" + (origins if k == "complete" else "")
                                                         for k, v in summary["trials"].items() if v) + target,
             "objectives: " + ", ".join(f"{o['direction']} {o['metric']}" for o in summary["objectives"])]
    cal = summary["calibration"] or {}
    if cal.get("verdict"):
        from hlnas.calibration.protocol import format_table

        lines.append("calibration:\n" + format_table(cal["verdict"]))
        if summary.get("calibration_advice"):  # an invalid verdict: why, and what to change (as hlnas calibrate said)
            lines += ["why not valid:", *(f"  - {m}" for m in cal["verdict"].get("failures") or ()),
                      f"change: {summary['calibration_advice']}"]
    elif cal.get("status") == "running":  # a calibration split over several runs of the study
        pr = summary.get("calibration_progress")
        if not pr:
            lines.append(f"calibration: running, {len(cal.get('runs') or {})} runs stored (the next run of the study continues it)")
        else:
            from hlnas.calibration.protocol import format_table

            need = pr["pure_below_min_mixers"]
            lines.append(f"calibration: running, {pr['stored']} of {pr['planned']} runs stored (the next run of the study "
                         "continues it); the rows so far:\n"
                         + format_table(pr["verdict"], partial="no verdict yet: rows without every seed are 'missing'; "
                                                               "a row not yet apart from its baseline, while its partner "
                                                               "lacks a seed, is 'open'"))
            if need:
                lines.append(f"pure below its hybrid can still hold for {len(pr['pure_below_open'])} mixer(s) "
                             f"({', '.join(pr['pure_below_open']) or 'none'}); the space asks {need}")
            if pr.get("graded_min_mixers"):
                lines.append(f"the graded measure can still rise for {len(pr['graded_open'])} mixer(s) "
                             f"({', '.join(pr['graded_open']) or 'none'}); the space asks {pr['graded_min_mixers']}")
            lines.append(f"CANNOT PASS any more: {pr['cannot_pass']}" if pr["cannot_pass"]
                         else "can still pass: nothing stored so far rules it out")
    elif cal.get("status") == "closed":  # given up by hand (hlnas calibrate --close), for a reason outside its runs
        lines.append(f"calibration: CLOSED on {cal.get('closed_at')} with {len(cal.get('runs') or {})} runs stored: "
                     f"{cal.get('reason')}")
    elif cal:
        lines.append(f"calibration: {cal.get('status')}")
    lines.append(front_table(summary["front"], summary["calibration"]))
    if summary.get("export"):  # each front member as an fla config (hlnas.analysis.export.front_exports)
        lines.append("\nexport a front member as an fla model config (paper-340m here; --scale paper-1.3b or --width "
                     "--depth --heads --vocab for others; docs/export.md):")
        lines += [f"  {e['number']:>4}  " + (e["command"] or f"cannot export: {e['refusal']}") for e in summary["export"]]
    return "\n".join(lines)


#: the fields of a training record that ``hlnas train`` prints (the whole record goes to metrics.json)
TRAIN_SUMMARY_FIELDS = ("status", "layout", "params", "steps", "tokens", "final_loss", "val_loss", "tokens_per_s", "wall_s",
                        "device", "error_kind", "error")


def train_summary(record: dict) -> str:
    """``hlnas train``'s JSON summary of a run record (:meth:`hlnas.pipeline.run.RunResult.record`): its headline fields
    and its scalar scores (RULER's per-task detail stays in metrics.json)."""
    summary = {k: record.get(k) for k in TRAIN_SUMMARY_FIELDS}
    scores = {k: v for k, v in (record.get("scores") or {}).items() if not isinstance(v, dict)}
    return json.dumps({**summary, **({"scores": scores} if scores else {})}, indent=1, default=str)


def layout_record(layout, preset: str, cost) -> dict:
    """``hlnas layout --json``: the layout (a :class:`hlnas.model.layout.Layout`) and its :class:`hlnas.model.cost.LayoutCost`."""
    return {
        "layout": str(layout),
        "mixers": list(layout.mixers),
        "attention_layers": list(layout.attention_layers),
        "ratio": layout.ratio,
        "preset": preset,
        **{k: v for k, v in cost.to_dict().items() if k not in ("layout", "attention_layers")},
    }


def layout_card(layout, preset: str, cost) -> str:
    """``hlnas layout``: the layers drawn one character each, then the cost, one figure a line."""
    picture = "".join("█" if m == "attention" else "▒" if m.startswith("swa:") else "·" for m in layout.mixers)
    key = "█ attention  ▒ sliding window  · linear" if "▒" in picture else "█ attention  · linear"
    return "\n".join([
        f"layout         {layout}   ({layout.describe()})",
        f"layers         {picture}   {key}",
        f"preset         {preset} (MLP width {cost.mlp_hidden})",
        f"params         {cost.params:,}",
        f"KV cache       {format_bytes(cost.kv_cache_bytes)}  (context {cost.context}, batch {cost.batch}, {cost.dtype})",
        f"linear state   {format_bytes(cost.state_bytes)}  (constant in context)",
        f"inference mem  {format_bytes(cost.inference_bytes)}  (weights + KV + state)",
        f"FLOPs/token    {cost.flops_per_token:,}  (forward)",
    ])


def bench_run_line(run, elapsed_s: float) -> str:
    """One finished run of ``hlnas bench-samplers`` (a :class:`hlnas.analysis.tabular.SamplerRun`)."""
    return (f"  {run.sampler:<10} seed {run.seed}: {len(run.hv)} evaluated ({run.asked} asked), "
            f"100% after {run.evals_to(1.0) or 'never'}  [{elapsed_s:.1f}s]")


def bench_summary(comparison) -> str:
    """The sampler comparison (a :class:`hlnas.analysis.comparison.Comparison`) as a markdown table under its heading."""
    return (f"\nhypervolume (fraction of the table's) after N distinct evaluations, mean ± std over "
            f"{len(comparison.seeds)} seeds:\n\n" + comparison.to_markdown())
