"""LM-half runs of a space's layouts at given token budgets and seeds, shared by ``lm_budget.py`` and ``lm_grid.py``.

Each run trains and scores one candidate through :func:`hlnas.pipeline.run.run`, as a search trial does, with the
space's model, training and data settings, its token budget and its seed: ``train.seed`` (the weights) and
``data.seed`` (the order of the training text) are both set to the run's seed, so two seeds differ in data as well
as in initialisation. Only ``val_loss`` is scored (the recall half is not retrained). Each finished run is appended
to a JSONL file as one row, so a call cut short resumes where it stopped; ``--workers`` runs share a GPU as processes.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import re
import time
from dataclasses import dataclass
from pathlib import Path

from hlnas.errors import HlnasError

__all__ = ["add_run_args", "LMRun", "parse_tokens", "cells_of", "plan", "run_all", "read_rows", "rows_of"]


@dataclass(frozen=True)
class LMRun:
    mixer: str  # a linear mixer or 'transformer'
    ratio: str  # pure, r:1, or 'transformer'
    layout: str  # the compact layout string
    tokens: int
    seed: int

    @property
    def key(self) -> str:
        return f"{self.layout}|{self.tokens}|{self.seed}"


def add_run_args(ap) -> None:
    """The options every LM-runs script takes: ``--set``, ``--seeds``, ``--workers``, ``--retry-failed``, ``--deadline``."""
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override a setting of the space")
    ap.add_argument("--seeds", default="0,1", help="comma-separated seeds (initialisation and data order; default 0,1)")
    ap.add_argument("--workers", type=int, default=1, help="runs at a time, as processes sharing the device (default 1)")
    ap.add_argument("--retry-failed", action="store_true", help="train failed runs again")
    ap.add_argument("--deadline", type=float, help="seconds after which no run starts and unfinished ones stop (a device "
                    "call's limit); the finished runs are kept and the rest resume in the next call")


def parse_tokens(text: str) -> int:
    """``2097152``, ``2M`` (2**20 multiples: 2M = 2,097,152 tokens, the grid's budget), ``512K``, ``0.25M``."""
    m = re.fullmatch(r"\s*([\d.]+)\s*([KkMm]?)\s*", text)
    if not m:
        raise HlnasError(f"token budget {text!r} is not a number; write e.g. 2097152, 512K or 2M (M = 2**20)")
    n = float(m.group(1)) * {"": 1, "k": 2**10, "m": 2**20}[m.group(2).lower()]
    if n < 1 or n != int(n):
        raise HlnasError(f"token budget {text!r} is not a whole positive number of tokens")
    return int(n)


def cells_of(space, names: list[str] | None) -> list[tuple[str, str]]:
    """(mixer, ratio) cells: ``names`` as ``mixer:ratio`` (``transformer`` alone), each checked against the space, or
    every candidate of the space."""
    if not names:
        out = []
        for point in space.grid():
            mixer = point["mixer"]
            out.append((mixer, "transformer" if mixer == "transformer" else point["ratio"]))
        return out
    out = []
    for name in names:
        mixer, _, ratio = name.partition(":")
        ratio = "transformer" if mixer == "transformer" else (ratio or "pure")
        _layout(space, mixer, ratio)  # raises naming what the space allows
        out.append((mixer, ratio))
    return out


def _layout(space, mixer: str, ratio: str) -> str:
    point = {"mixer": mixer} if mixer == "transformer" else {"mixer": mixer, "ratio": ratio, "placement": "paper"}
    return str(space.layout(point))


def plan(space, cells: list[tuple[str, str]], budgets: list[int], seeds: list[int]) -> list[LMRun]:
    """Every (cell, budget, seed) run; the cheapest budgets first, so a call cut short leaves whole budgets done."""
    step = space.train.batch_size * space.train.seq_len
    for b in budgets:
        if b < step:
            raise HlnasError(f"token budget {b:,} is less than one step of batch_size*seq_len={step:,} tokens")
    return [LMRun(m, q, _layout(space, m, q), b, s) for b in sorted(budgets) for s in seeds for m, q in cells]


def _recipe(space, run: LMRun):
    from hlnas.pipeline.recipe import RunConfig
    from hlnas.score.objectives import ScoreConfig

    return RunConfig(layout=space.layout({"mixer": run.mixer} if run.mixer == "transformer" else
                                         {"mixer": run.mixer, "ratio": run.ratio, "placement": "paper"}),
                     model=space.model, train=dataclasses.replace(space.train, tokens=run.tokens, seed=run.seed),
                     data=dataclasses.replace(space.data, seed=run.seed), score=ScoreConfig(objectives=("val_loss",)),
                     preset=space.preset)


def run_one(space_dict: dict, run: LMRun) -> dict:
    """One run as a row (the space travels as its dict, so a worker process rebuilds it)."""
    from hlnas.model.cost import layout_metrics
    from hlnas.pipeline.run import run as run_recipe
    from hlnas.space import space_from_dict

    space = space_from_dict(space_dict)
    t0 = time.perf_counter()
    row = {**dataclasses.asdict(run), "key": run.key, "data_seed": run.seed}
    cost = layout_metrics(run.layout, space.model, space.kv_context)
    row.update(params=cost["params"], target_params=cost["target_params"], mlp_hidden=cost["mlp_hidden"])
    try:
        r = run_recipe(_recipe(space, run))
        m = r.metrics
        row.update(status=r.status, val_loss=m.get("val_loss"), final_loss=m.get("final_loss"),
                   train_wall_s=m.get("train_wall_s"), steady_tokens_per_s=m.get("steady_tokens_per_s"),
                   device_name=m.get("device_name"), data_tokenizer=m.get("data_tokenizer"),
                   data_corpus=m.get("data_corpus"), data_corpus_sha256=m.get("data_corpus_sha256"), error=r.error)
    except Exception as e:  # a failed run is a row: the others go on
        row.update(status="failed", error=f"{type(e).__name__}: {e}"[:500])
    row["wall_s"] = round(time.perf_counter() - t0, 3)
    return row


def read_rows(path: str | Path) -> list[dict]:
    """The rows of a runs file, the last row of each key kept (a re-run replaces a failed one)."""
    p = Path(path)
    if not p.is_file():
        return []
    rows = {}
    for line in p.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            rows[row["key"]] = row
    return list(rows.values())


def run_all(space, runs: list[LMRun], out: str | Path, *, workers: int = 1, retry_failed: bool = False,
            deadline_s: float | None = None) -> list[dict]:
    """Every run of ``runs`` not in ``out`` yet (a failed one again with ``retry_failed``), appended as it finishes;
    returns all rows of ``out``. ``deadline_s``: after that many seconds no run starts and the unfinished ones are
    stopped (their workers terminated), so a device call ends inside its limit with every finished run kept."""
    from tqdm.auto import tqdm

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = {r["key"]: r for r in read_rows(out)}
    todo = [r for r in runs if r.key not in done or (retry_failed and done[r.key].get("status") != "ok")]
    space_dict = space.to_dict()
    t_end = None if deadline_s is None else time.monotonic() + deadline_s
    with open(out, "a") as fh, tqdm(total=len(todo), desc="runs", unit="run", dynamic_ncols=True) as bar:
        def keep(row: dict) -> None:
            row["concurrency"] = max(1, workers)  # runs sharing the device: wall seconds / this estimates GPU-seconds
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            bar.update(1)
            bar.set_postfix(last=f"{row['mixer']} {row['ratio']} {row['tokens']:,} s{row['seed']}: {row.get('val_loss')}",
                            refresh=False)

        if workers <= 1 and t_end is None:
            for run in todo:
                keep(run_one(space_dict, run))
        elif todo:
            _pooled(space_dict, todo, max(1, workers), t_end, keep)
    return read_rows(out)


def rows_of(args, space, runs: list[LMRun]) -> list[dict]:
    """The rows of ``runs`` in ``args.out``'s runs file: read back with ``--analyse``, else trained first (the runs
    not there yet, under the options of :func:`add_run_args`). Rows of other runs in the file are left out."""
    runs_file = f"{args.out}/runs.jsonl"
    rows = read_rows(runs_file) if args.analyse else run_all(space, runs, runs_file, workers=args.workers,
                                                             retry_failed=args.retry_failed, deadline_s=args.deadline)
    keys = {r.key for r in runs}
    return [r for r in rows if r["key"] in keys]


def _pooled(space_dict: dict, todo: list[LMRun], workers: int, t_end: float | None, keep) -> None:
    """The runs in ``workers`` spawned processes (CUDA needs spawn), each result kept as it comes; at ``t_end`` the
    pool is terminated and what had not finished is left for the next call."""
    if t_end is not None and time.monotonic() >= t_end:
        print("lm_runs: deadline reached before any run; they resume in the next call", flush=True)
        return
    ctx = multiprocessing.get_context("spawn")
    pool = ctx.Pool(workers)  # workers live across runs: each new process would pay its imports and CUDA start again
    try:
        results = pool.imap_unordered(_run_packed, [(space_dict, r) for r in todo])
        for _ in todo:
            left = None if t_end is None else t_end - time.monotonic()
            if left is not None and left <= 0:
                print(f"lm_runs: deadline reached; {len(todo)} runs planned, the rest resume in the next call", flush=True)
                break
            try:
                keep(results.next(timeout=left))
            except multiprocessing.TimeoutError:
                print("lm_runs: deadline reached; unfinished runs stopped, they resume in the next call", flush=True)
                break
    finally:
        pool.terminate()
        pool.join()


def _run_packed(args: tuple) -> dict:
    return run_one(*args)
