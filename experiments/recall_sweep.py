"""Sweep fresh-model MQAR recall protocols: which settings make the recall axis measure recall?

Each case is one layout trained by hlnas's own recall proxy (``hlnas.recall.proxy.train_mqar``, the
``mqar`` objective, run as a recall-only trial on hlnas's process executor, several cases sharing the
machine's GPUs) under one MQAR task, one recall-model width and one learning rate. Prints one JSON line
per case and writes ``OUT/recall_sweep.jsonl`` and a markdown table with each case's no-recall baseline.

    python experiments/recall_sweep.py --cases cases.json --jobs 14 --deadline 420 --out results/
    python experiments/recall_sweep.py --layouts AAAAAA,GGAGGA --lrs 1e-3,3e-4 --kv-pairs 4 --seq-len 32 ...
    python experiments/recall_sweep.py --cases cases.json --state /tmp/sweep_state --pause-by 480 ...  # then again

With ``--state DIR`` a sweep spans several invocations (a probe longer than one 10-minute device call): each case keeps
its recall model's state in ``DIR`` and, past ``--pause-by`` seconds, pauses at its next check (a ``paused`` row);
run the same command again and the paused cases continue exactly where they stopped (the curve of one straight run,
``hlnas.recall.proxy.paused_at``), while the cases already finished are read back from ``DIR/done.jsonl``, not
trained again. A case is known by its settings (the case and the options that shape its run), not its position. A
continued case's ``wall_s`` adds the wall time of the invocations it paused in (``wall_s_this_run``: this one's).

A case file is a JSON list of objects with keys ``layout`` (a layout string, or ``mixer:ratio`` built at
``--layers``), and optional ``lr`` (default: the first of ``--lrs``), ``kv_pairs``, ``seq_len``, ``vocab``, ``d_model``, ``n_heads``,
``mixer_hparams`` (e.g. ``{"attention": {"input_conv": 4}}``), ``residual_init``, ``steps``, ``seed``, ``tag``,
``task`` (``mqar`` or ``vt``: multi-hop variable tracking), ``vt`` (``{"chains": 6, "hops": [0, 5], "query": "last"}``),
``compile``. Missing keys take the command line's values. A VT case's row and table add its test accuracy per hop count
of the query, each hop beside its own no-recall baseline (``by_hop``). ``--check`` builds every case's recall model
on the CPU and trains nothing: a case file's mistakes (a layout, a mixer setting) show before a device call.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path


def _layout(text: str, layers: int) -> str:
    from hlnas.model.layout import Layout, build_layout

    if ":" in text:
        mixer, ratio = text.split(":", 1)
        if mixer == "transformer":
            return str(build_layout("transformer", None, layers))
        return str(build_layout(mixer, ratio, layers))
    return str(Layout.parse(text))


def _spec(i: int, case: dict, args):
    from hlnas.model.config import preset
    from hlnas.data.sources import DataConfig
    from hlnas.model.layout import Layout
    from hlnas.pipeline.recipe import RunConfig
    from hlnas.score.objectives import MqarConfig, ScoreConfig
    from hlnas.lm.trainer import TrainConfig
    from hlnas.search.trial import TrialSpec

    model = preset(args.preset).replace(d_model=case.get("d_model", args.d_model), n_heads=case.get("n_heads", args.heads),
                                        target_params=None, mlp_hidden=None,
                                        residual_init=case.get("residual_init", args.residual_init),
                                        mixer_hparams=case.get("mixer_hparams", {}))
    mqar = MqarConfig(seq_len=case.get("seq_len", args.seq_len), kv_pairs=case.get("kv_pairs", args.kv_pairs),
                      vocab=case.get("vocab", args.vocab), steps=case.get("steps", args.steps),
                      batch=case.get("batch", args.batch), lr=float(case["lr"]), target=args.target,
                      eval_every=args.eval_every, test=args.test, val=args.val, graph=case.get("graph", not args.no_graph),
                      budget_s=case.get("budget_s", args.budget_s), task=case.get("task", args.task),
                      vt=case.get("vt", json.loads(args.vt)), compile=case.get("compile", False))
    score = ScoreConfig(objectives=("mqar",), mqar=mqar)
    train = TrainConfig(seed=case.get("seed", 0), tokens=1, batch_size=1, seq_len=1)  # recall-only: no LM training
    recipe = RunConfig(layout=Layout.parse(case["layout"]), model=model, train=train, data=DataConfig(), score=score,
                       preset=args.preset)
    return TrialSpec(number=i, recipe=recipe, recall_only=True)


def _groups(cases: list[dict], replicas: bool) -> list[list[tuple[int, dict]]]:
    """The cases as units of work, ``[(index, case), ...]`` each: one case each, or with ``replicas`` the cases that
    differ only in their seed (and their ``tag``, a label) together (trained as replicas of one recall model,
    hlnas.recall.replicas)."""
    if not replicas:
        return [[(i, c)] for i, c in enumerate(cases)]
    by: dict[str, list] = {}
    for i, c in enumerate(cases):
        by.setdefault(json.dumps({k: v for k, v in c.items() if k not in ("seed", "tag")}, sort_keys=True), []).append((i, c))
    return list(by.values())


#: the options that shape a case's run: with the case's own keys they name its state under --state
_RUN_OPTIONS = ("layers", "preset", "d_model", "heads", "residual_init", "kv_pairs", "seq_len", "vocab", "batch", "steps",
                "target", "eval_every", "test", "val", "no_graph", "budget_s", "task", "vt")


def _state_key(unit: list[tuple[int, dict]], args) -> str:
    """A unit's name under --state: a hash of its cases and the options that shape their runs (so a changed case or
    option starts afresh instead of continuing another run's state)."""
    import hashlib

    what = {"cases": [c for _, c in unit], "options": {k: getattr(args, k) for k in _RUN_OPTIONS}}
    return hashlib.sha1(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _done_rows(state: Path) -> dict[str, dict]:
    """The finished rows kept under --state, by state key (the last one of a key wins)."""
    f = state / "done.jsonl"
    rows = [json.loads(line) for line in f.read_text().splitlines() if line.strip()] if f.exists() else []
    return {r["state_key"]: r for r in rows}


def _earlier_wall_s(state: Path) -> dict[str, float]:
    """The wall seconds each case spent in earlier invocations before it paused, by state key (``DIR/paused.jsonl``,
    one line a pause)."""
    f = state / "paused.jsonl"
    out: dict[str, float] = {}
    for r in map(json.loads, filter(str.strip, f.read_text().splitlines() if f.exists() else [])):
        out[r["state_key"]] = out.get(r["state_key"], 0.0) + r["wall_s"]
    return out


def _row(case: dict, r, at_s: float) -> dict:
    """One finished (or, under --state, paused) case's line of recall_sweep.jsonl (``r``: its TrialResult). ``auc`` is over the whole step
    schedule, as a protocol scores it: a case its time budget (``budget_s``) cut short counts 0 for the steps it never
    had, so such a row also carries ``cut_at`` (its steps) and ``auc_steps_done``, the area over the steps it had; a
    paused row carries ``auc_steps_done`` too (its table cell says over how many steps)."""
    from hlnas.recall.proxy import learning_auc

    m = r.metrics
    mq = m.get("mqar") or {}
    run = (mq.get("runs") or [{}])[-1]
    steps, schedule = m.get("mqar_steps_done"), mq.get("steps")
    cut = {}
    cut_short = (r.status == "ok" and steps is not None and schedule and steps < schedule
                 and m.get("mqar_steps_to_target") is None and not m.get("mqar_error"))
    if (cut_short or (r.status == "paused" and steps)) and run.get("curve") and m.get("mqar_val_baseline") is not None:
        cut = {"cut_at": steps} if cut_short else {}
        cut["auc_steps_done"] = round(learning_auc(run["curve"], steps, m["mqar_val_baseline"], False), 4)
    return {**case, "status": r.status, "acc": m.get("mqar_acc"), "baseline": m.get("mqar_baseline"),
            "baseline_name": m.get("mqar_baseline_name"), "steps": m.get("mqar_steps_done"), "schedule": schedule,
            "auc": m.get("mqar_auc"), "steps_to_target": m.get("mqar_steps_to_target"),
            "wall_s": round(r.wall_s, 1), "mode": mq.get("mode"), "params": mq.get("params"),
            "curve": run.get("curve"), "error": _error_text(r.error or m.get("mqar_error")),
            "kv_pairs": mq.get("kv_pairs"), "seq_len": mq.get("seq_len"), "model": mq.get("model"),
            "task": mq.get("task"), "vt": mq.get("vt"), "by_hop": m.get("mqar_by_hop"),
            "replicas_error": m.get("replicas_error"), "at_s": round(at_s, 1),
            "kernel_fallbacks": mq.get("kernel_fallbacks"), "peak_gib": mq.get("peak_gib"), **cut}


def _error_text(error: str | None, keep: int = 300) -> str | None:
    """A failed case's error for its row: its first line (the exception and its message) and the end of the rest,
    where the row once kept only the last 300 characters (on 2026-12-06 a CUDA error's row said nothing but the
    tail of CUDA's advice)."""
    if not error:
        return None
    first, _, rest = error.strip().partition("\n")
    if len(rest) <= keep:
        return f"{first}\n{rest}" if rest else first
    return f"{first} [...] {rest[-keep:]}"


def _by_hop(by_hop: dict | None) -> str:
    """``h0 0.990 [0.462], h1 ...``: a VT row's accuracy per hop count with each hop's no-recall baseline."""
    if not by_hop:
        return ""
    return ", ".join(f"h{h} {v['acc']:.3f} [{v['baseline']:.3f}]" for h, v in sorted(by_hop.items(), key=lambda kv: int(kv[0])))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", help="JSON file of cases (see the module docstring)")
    p.add_argument("--match", help="only the cases whose tag contains this text (a part of a case file, e.g. one mixer)")
    p.add_argument("--seeds", help="only the cases of these seeds, comma-separated (a case file's seeds over several "
                                   "sessions: a paused case cannot outlive its machine)")
    p.add_argument("--layouts", help="comma-separated layouts or mixer:ratio (instead of --cases), crossed with --lrs")
    p.add_argument("--lrs", default="1e-3")
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--preset", default="proxy-gpu")
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=2, help="attention heads")
    p.add_argument("--residual-init", default="fla", help="the recall model's residual output init: fla or zero")
    p.add_argument("--kv-pairs", type=int, default=64)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=4000)
    p.add_argument("--target", type=float, default=0.99)
    p.add_argument("--eval-every", type=int, default=250)
    p.add_argument("--test", type=int, default=512)
    p.add_argument("--val", type=int, default=256)
    p.add_argument("--no-graph", action="store_true")
    p.add_argument("--task", default="mqar", help="mqar, or vt (multi-hop variable tracking; settings in --vt)")
    p.add_argument("--vt", default='{"chains": 4, "hops": [0, 2]}', help="the VT task's settings as JSON: chains, hops "
                   "(a number or [lo, hi]), query (last or any)")
    p.add_argument("--budget-s", type=float, default=None, help="seconds per case (each stops at its next check)")
    p.add_argument("--jobs", type=int, default=1, help="cases at once (worker processes sharing the GPUs)")
    p.add_argument("--runs-per-worker", type=int, default=1,
                   help="cases at once in each worker process, each on its own CUDA stream (hlnas.search.executors)")
    p.add_argument("--replicas", action="store_true",
                   help="cases that differ only in their seed (and tag) train as replicas of one recall model in one worker "
                        "(stacked weights, the seeds in the batch; each result the one it gets alone; issue #21)")
    p.add_argument("--deadline", type=float, default=None, help="seconds after which no case starts; running ones are "
                   "stopped at deadline + --grace and reported as unfinished")
    p.add_argument("--grace", type=float, default=60.0)
    p.add_argument("--state", help="folder that keeps each case's recall model, so a later run of the same command "
                   "continues the paused cases and reads back the finished ones (see the module docstring)")
    p.add_argument("--pause-by", type=float, default=None, help="with --state: seconds after which running cases "
                   "pause at their next check, their state kept for the next run")
    p.add_argument("--out", default="recall_sweep")
    p.add_argument("--check", action="store_true", help="build each case's recall model on the CPU, print one line a "
                   "case and exit: train nothing (a case file's mistakes show before a device call)")
    return p


def check(cases: list[dict], args) -> list[str]:
    """One line per case (its tag, layout, task length, rate, seed and recall model's parameters) from building the
    model each case would train, without training; raises on the first case that cannot be built. Equal models are
    built once."""
    from hlnas.model.build import build_model
    from hlnas.recall.proxy import recall_setup

    built, lines = {}, []
    for i, case in enumerate(cases):
        r = _spec(i, case, args).recipe
        setup = recall_setup(r.layout, r.model, r.score.mqar)
        key = (str(setup.layout), repr(setup.model))
        if key not in built:
            try:
                built[key] = sum(p.numel() for p in build_model(setup.layout, setup.model).parameters())
            except Exception as e:  # noqa: BLE001 - the case is named with whatever its model refused
                raise SystemExit(f"case {i} ({case.get('tag') or case['layout']}): {type(e).__name__}: {e}") from None
        lines.append(f"case {i}: {case.get('tag') or '-'}  {setup.layout}  L {setup.task.seq_len}  lr {case['lr']:g}  "
                     f"seed {case['seed']}  recall model {built[key]:,} parameters")
    return lines


def _cases(args) -> list[dict]:
    """The cases to run: --cases' file, or --layouts crossed with --lrs; each with its layout string, lr and seed."""
    if args.cases:
        cases = json.loads(Path(args.cases).read_text())
        if args.match:
            cases = [c for c in cases if args.match in (c.get("tag") or "")]
            if not cases:
                raise SystemExit(f"recall_sweep: no case of {args.cases} has a tag containing {args.match!r}")
        if args.seeds:
            try:
                seeds = {int(x) for x in args.seeds.split(",") if x.strip()}
            except ValueError:
                raise SystemExit(f"recall_sweep: --seeds takes comma-separated integers, got {args.seeds!r}") from None
            cases = [c for c in cases if int(c.get("seed", 0)) in seeds]
            if not cases:
                raise SystemExit(f"recall_sweep: no case of {args.cases} has a seed in {sorted(seeds)}")
    else:
        cases = [{"layout": lay, "lr": float(lr)} for lay in (args.layouts or "").split(",") if lay
                 for lr in args.lrs.split(",")]
    for c in cases:
        c["layout"] = _layout(c["layout"], args.layers)
        c.setdefault("lr", float(args.lrs.split(",")[0]))
        c.setdefault("seed", 0)
    return cases


def _run(cases: list[dict], args, log) -> list[dict]:
    """Every case through the worker processes (a group of seeds as replicas with --replicas): a row each, printed and
    appended to ``log`` as it comes; the cases not done by --deadline + --grace as unfinished rows."""
    from hlnas.search.executors import make_executor

    groups, rows = _groups(cases, args.replicas), []
    state = Path(args.state) if args.state else None
    keys = {units[0][0]: _state_key(units, args) for units in groups} if state else {}
    if state:
        state.mkdir(parents=True, exist_ok=True)
        done, earlier = _done_rows(state), _earlier_wall_s(state)
        rows = [{**done[keys[u[0][0]]], "from_state": True} for u in groups if keys[u[0][0]] in done]
        groups = [u for u in groups if keys[u[0][0]] not in done]
        for row in rows:  # in this run's record too: its table and jsonl hold every case
            print(json.dumps(row), flush=True)
            log.write(json.dumps(row) + "\n")
    pause_by = time.time() + args.pause_by if args.pause_by is not None else None
    jobs = max(1, min(args.jobs, len(groups)))
    ex = make_executor("processes", -(-jobs // args.runs_per_worker), runs_per_worker=args.runs_per_worker)
    t0 = time.monotonic()
    queue, running = groups, {}
    try:
        while queue or running:
            late = args.deadline is not None and time.monotonic() - t0 > args.deadline
            while queue and ex.in_flight() < ex.capacity and not late:
                (i, case), *others = queue.pop(0)
                spec = _spec(i, case, args)
                if others:  # the group's other seeds: their recall trained as replicas of one model with this one's
                    spec = dataclasses.replace(spec, replicas=tuple(_spec(j, c, args) for j, c in others))
                if state:  # its recall model's state kept (and continued) under its key; paused past --pause-by
                    spec = dataclasses.replace(spec, state_dir=str(state / keys[i]), pause_by=pause_by)
                ex.submit(spec)
                running.update({i: case, **dict(others)})
            if late and args.deadline is not None and time.monotonic() - t0 > args.deadline + args.grace:
                break
            for result in ex.wait(timeout=2.0):
                for r in (result, *result.replicas):
                    row = _row(running.pop(r.number), r, time.monotonic() - t0)
                    if state:  # (no replicas under --state: every result is a unit's head, keyed by its number)
                        row["state_key"] = key = keys[r.number]
                        before = earlier.get(key)  # a continued case's wall_s counts every invocation
                        if r.status == "paused":
                            with open(state / "paused.jsonl", "a") as f:
                                f.write(json.dumps({"state_key": key, "wall_s": row["wall_s"]}) + "\n")
                        if before:
                            row.update(wall_s=round(row["wall_s"] + before, 1), wall_s_this_run=row["wall_s"])
                        if r.status != "paused":  # finished (or failed): read back next time, not trained again
                            with open(state / "done.jsonl", "a") as f:
                                f.write(json.dumps(row) + "\n")
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                    log.write(json.dumps(row) + "\n")
                    log.flush()
    finally:
        ex.shutdown()
    for i, case in [*running.items(), *(ic for g in queue for ic in g)]:
        rows.append({**case, "status": "unfinished"})
    return rows


def _table(rows: list[dict]) -> list[str]:
    """The sweep's markdown table, a row per case, sorted by tag, layout, lr and seed."""
    lines = ["| layout | tag | seed | K | L | lr | acc | no-recall | steps | to target | auc | wall s | mode | VT by hop: acc [no-recall] |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    fallbacks: dict[str, list[str]] = {}  # kernel fallback -> the cases whose process gave it
    for r in sorted(rows, key=lambda r: (r.get("tag", ""), r["layout"], r.get("lr", 0), r.get("seed", 0))):
        for f in r.get("kernel_fallbacks") or ():
            fallbacks.setdefault(f, []).append(f"{r.get('tag') or r['layout']} s{r['seed']}")
        acc = "-" if r.get("acc") is None else f"{r['acc']:.3f}"
        base = "-" if r.get("baseline") is None else f"{r['baseline']:.3f}"
        # a case cut by its time budget: its steps as "done (cut)", its area over the steps it had
        steps = (f"{r['cut_at']} (cut by budget_s)" if "cut_at" in r
                 else f"{r.get('steps', '')} (paused)" if r.get("status") == "paused" else r.get("steps", ""))
        auc = (f"{r['auc_steps_done']:.3f} over {r.get('cut_at', r.get('steps'))} steps" if "auc_steps_done" in r
               else "-" if r.get("auc") is None else f"{r['auc']:.3f}")
        lines.append(f"| {r['layout']} | {r.get('tag', '')} | {r['seed']} | {r.get('kv_pairs', '')} | {r.get('seq_len', '')} | "
                     f"{r['lr']:g} | {acc} | {base} | {steps} | {r.get('steps_to_target') or '-'} | {auc} | "
                     f"{r.get('wall_s', '')} | {r.get('mode', r['status'])} | {_by_hop(r.get('by_hop'))} |")
    if fallbacks:  # what ran on the PyTorch kernels where fla was asked for: the runs' speed and memory are not fla's
        lines += ["", "Kernel fallbacks (ops these cases' processes ran on the PyTorch kernels instead of fla, and why):", ""]
        lines += [f"- {f}: {', '.join(cases)}" for f, cases in fallbacks.items()]
    return lines


def main(argv=None) -> int:
    p = _parser()
    args = p.parse_args(argv)
    if args.pause_by is not None and not args.state:
        p.error("--pause-by needs --state (the folder that keeps the paused cases)")
    if args.state and args.replicas:
        p.error("--state does not combine with --replicas: run replica groups in one call")
    os.environ.setdefault("HLNAS_RECALL_PROGRESS", "1")  # workers inherit it: a line per check in the log
    from hlnas.errors import HlnasError

    try:
        cases = _cases(args)
    except HlnasError as e:  # a layout the case file misspelt: one line naming it, nothing started
        p.error(f"{args.cases or '--layouts'}: {e}")
    if args.check:
        print("\n".join(check(cases, args)))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "recall_sweep.jsonl", "a") as log:
        rows = _run(cases, args, log)
    lines = _table(rows)
    (out / "recall_sweep.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
