"""Language-modelling scores: validation loss on held-out batches, and any hlnas model as an lm-eval ``LM``.

* :func:`validation_loss` -- token-weighted cross-entropy (nats/token) and perplexity.
* :class:`HlnasLM` -- ``lm_eval.api.model.LM`` over a model with ``forward(ids [B, T]) -> logits [B, T, V]``
  and ``new_cache()``; implements ``loglikelihood``, ``loglikelihood_rolling`` and greedy ``generate_until``.
* :func:`run_lm_eval` -- ``lm_eval.simple_evaluate`` with that LM, returning ``{task: {metric: value}}``.

Conventions (one rule everywhere, so every score reads the model the way it was trained, on documents
that follow an end-of-document token):

* every scored or generated sequence starts with the tokenizer's ``eos_id`` as a prefix token, so the
  first text token is conditioned on it (lm-eval's ``prefix_token_id`` convention; HFLM applies it only
  to empty contexts and rolling windows, we apply it to every context);
* ``loglikelihood``: ``[eos] + context + continuation`` is cut from the left to ``max_length + 1`` tokens;
  the model reads the first ``max_length`` and the continuation's tokens are scored;
* ``loglikelihood_rolling``: lm-eval's own windows (``get_rolling_token_windows`` with ``context_len=1``,
  made disjoint): windows of ``max_length`` predicted tokens, the first conditioned on ``eos``, each later
  one on the token before it, and the last (short) one on a full ``max_length`` context. Each token is
  scored once. For a text of ``n * max_length`` tokens (or fewer than ``max_length``) this is exactly
  ``-validation_loss`` times the token count of ``[eos] + text`` cut into ``[max_length + 1]`` windows
  overlapping by one token;
* ``generate_until``: greedy, prompt ``[eos] + context`` cut from the left to ``max_length - max_gen_toks``
  tokens, prefilled once into the model's cache, then one token per step.

Paper tasks (``PAPER_LM_TASKS``) read Hugging Face datasets. Where one cannot be loaded (offline and not
cached) :func:`run_lm_eval` raises :class:`TaskDataUnavailable` naming every such task and its dataset,
before any task runs: a search must not compare candidates scored on different task sets.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from lm_eval.api.model import LM
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
from torch import nn

from hlnas.data.tokenizer import Tokenizer
from hlnas.errors import ConfigError, HlnasError, did_you_mean
from hlnas.overrides import is_number
from hlnas.score.generate import greedy_generate_ids
from hlnas.score.loss import autocast_context, model_device, validation_loss

__all__ = [
    "PAPER_LM_TASKS",
    "HlnasLM",
    "TaskDataUnavailable",
    "UnknownTaskError",
    "run_lm_eval",
    "validation_loss",
]

# The paper's zero-shot commonsense/LM suite (arXiv 2507.06457, section 3.4).
PAPER_LM_TASKS = ("arc_challenge", "arc_easy", "hellaswag", "lambada_openai", "openbookqa", "piqa")


class UnknownTaskError(HlnasError, ValueError):
    """An lm-eval task name is neither built in nor under the given include_path."""


class TaskDataUnavailable(HlnasError, RuntimeError):
    """lm-eval tasks exist but their datasets cannot be loaded here (offline and not cached, or missing files).

    ``missing`` maps each such task to ``(dataset, reason)``.
    """

    def __init__(self, missing: dict[str, tuple[str, str]]):
        self.missing = dict(missing)
        lines = "; ".join(f"task '{t}' needs dataset '{d}' ({r})" for t, (d, r) in self.missing.items())
        super().__init__(
            f"cannot load the data of {len(self.missing)} lm-eval task(s): {lines}. "
            "Built-in tasks read Hugging Face datasets: load them once where the Hub is reachable so they land in "
            "the HF datasets cache (HF_DATASETS_CACHE), or leave the tasks out; local tasks need absolute data_files paths."
        )


class HlnasLM(LM):
    """An hlnas model as an lm-eval language model (see the module docstring for the conventions).

    ``model``: ``forward(input_ids [B, T]) -> logits [B, T, V]`` and, for generation, ``new_cache()``.
    ``tokenizer``: hlnas :class:`~hlnas.data.tokenizer.Tokenizer`; ``eos_id`` is the prefix token.
    ``max_length``: tokens the model reads at once. ``batch_size``: sequences per forward.
    The model is put in eval mode; every call runs without gradients.
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Tokenizer,
        max_length: int,
        batch_size: int = 8,
        device: torch.device | str | None = None,
        autocast_dtype: torch.dtype | None = None,
    ):
        super().__init__()
        if int(max_length) < 1:
            raise ConfigError(f"max_length must be >= 1, got {max_length}")
        if int(batch_size) < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.max_length = int(max_length)
        self.batch_size = int(batch_size)
        self._device = torch.device(device) if device is not None else model_device(model)
        self.autocast_dtype = autocast_dtype
        self.prefix_id = int(tokenizer.eos_id)

    # ---- scoring -------------------------------------------------------------------------------------

    def _encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        # Trailing spaces belong to the continuation and the pair is encoded jointly, as lm-eval does,
        # so a BPE tokenizer splits word boundaries the way it would in running text.
        n_spaces = len(context) - len(context.rstrip())
        if n_spaces:
            context, continuation = context[:-n_spaces], context[-n_spaces:] + continuation
        ctx = self.tokenizer.encode(context)
        whole = self.tokenizer.encode(context + continuation)
        if whole[: len(ctx)] != ctx:  # the tokenizer merged across the boundary; fall back to separate encodes
            return ctx, self.tokenizer.encode(continuation)
        return ctx, whole[len(ctx):]

    @torch.no_grad()
    def _score_tokens(self, pairs: Sequence[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]:
        """(context ids, continuation ids) -> (sum log p(continuation), every continuation token is the argmax).

        ``context + continuation`` is cut from the left to ``max_length + 1`` tokens (callers put the prefix
        token in the context). Sequences are right-padded into batches (longest first); causal models ignore
        the padding to their right.
        """
        L, out = self.max_length, [None] * len(pairs)
        seqs = []
        for i, (ctx, cont) in enumerate(pairs):
            if len(cont) > L:
                raise ConfigError(
                    f"a continuation of {len(cont)} tokens does not fit in max_length={L}; raise max_length"
                )
            if not cont:
                out[i] = (0.0, True)
                continue
            seqs.append((i, (list(ctx) + list(cont))[-(L + 1):], len(cont)))
        seqs.sort(key=lambda s: -len(s[1]))
        for start in range(0, len(seqs), self.batch_size):
            chunk = seqs[start:start + self.batch_size]
            width = len(chunk[0][1]) - 1
            inp = torch.full((len(chunk), width), self.prefix_id, dtype=torch.long)
            for row, (_, ids, _) in enumerate(chunk):
                inp[row, : len(ids) - 1] = torch.tensor(ids[:-1])
            with autocast_context(self._device, self.autocast_dtype):
                logits = self.model(inp.to(self._device))
            for row, (i, ids, n) in enumerate(chunk):
                end = len(ids) - 1  # logits at positions [end - n, end) predict the continuation
                logp = F.log_softmax(logits[row, end - n:end].float(), dim=-1)
                target = torch.tensor(ids[-n:], device=logp.device)
                ll = logp.gather(-1, target[:, None]).sum().item()
                out[i] = (ll, bool((logp.argmax(-1) == target).all()))
        return out

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """``req.args == (context, continuation)`` -> ``(log p(continuation | eos + context) in nats, is_greedy)``."""
        pairs = [self._encode_pair(*req.args) for req in requests]
        results = self._score_tokens([([self.prefix_id] + ctx, cont) for ctx, cont in pairs])
        for req, res in zip(requests, results):
            self.cache_hook.add_partial("loglikelihood", req.args, res)
        return results

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        """``req.args == (text,)`` -> ``log p(text | eos)`` in nats, over lm-eval's disjoint rolling windows."""
        pairs, owner = [], []
        for r, req in enumerate(requests):
            ids = self.tokenizer.encode(req.args[0])
            # the first window's context is [prefix]; later ones are text tokens only
            for window in get_rolling_token_windows(ids, self.prefix_id, self.max_length, context_len=1):
                pairs.append(make_disjoint_window(window))
                owner.append(r)
        totals = [0.0] * len(requests)
        for r, (ll, _) in zip(owner, self._score_tokens(pairs)):
            totals[r] += ll
        for req, res in zip(requests, totals):
            self.cache_hook.add_partial("loglikelihood_rolling", req.args, res)
        return totals

    # ---- generation ----------------------------------------------------------------------------------

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """``req.args == (context, gen_kwargs)`` -> greedy text, cut before the first ``until`` string.

        ``gen_kwargs``: ``until`` (str or list), ``max_gen_toks`` (default 256). Decoding also ends at
        ``eos``. Sampling (``do_sample: true`` or ``temperature > 0``) is refused: this LM is greedy only.
        Requests with the same ``until``/``max_gen_toks`` and prompt length decode together, ``batch_size``
        at a time, through the model's cache (:func:`hlnas.score.generate.greedy_generate_ids`).
        """
        groups: dict[tuple[tuple[str, ...], int], list[tuple[int, list[int]]]] = {}
        for i, req in enumerate(requests):
            context, kwargs = req.args
            kwargs = dict(kwargs or {})
            if kwargs.get("do_sample") or float(kwargs.get("temperature") or 0.0) > 0.0:
                raise ConfigError(
                    f"HlnasLM decodes greedily; got do_sample={kwargs.get('do_sample')}, "
                    f"temperature={kwargs.get('temperature')}. Set do_sample: false (temperature 0) in the task"
                )
            until = kwargs.get("until") or []
            until = tuple(s for s in ([until] if isinstance(until, str) else until) if s)
            max_new = int(kwargs.get("max_gen_toks", 256))
            if max_new < 1:
                raise ConfigError(f"max_gen_toks must be >= 1, got {max_new}")
            keep = max(1, self.max_length - max_new)  # leave room for the generated tokens
            prompt = ([self.prefix_id] + self.tokenizer.encode(context))[-keep:]
            groups.setdefault((until, max_new), []).append((i, prompt))
        out = [""] * len(requests)
        for (until, max_new), items in groups.items():
            def stop_check(ids: list[int], until=until) -> bool:
                text = self.tokenizer.decode(ids)
                return any(s in text for s in until)

            with autocast_context(self._device, self.autocast_dtype):
                new_ids = greedy_generate_ids(
                    self.model, [p for _, p in items], max_new, eos_id=self.prefix_id, device=self._device,
                    batch_size=self.batch_size, stop_check=stop_check if until else None,
                )
            for (i, _), ids in zip(items, new_ids):
                text = self.tokenizer.decode(ids)
                cuts = [text.find(s) for s in until if s in text]
                out[i] = text[: min(cuts)] if cuts else text
        for req, text in zip(requests, out):
            self.cache_hook.add_partial("generate_until", req.args, text)
        return out


# ---- lm-eval driver ----------------------------------------------------------------------------------


def _spec_name(spec: str | dict) -> str:
    return spec if isinstance(spec, str) else str(spec.get("task") or spec.get("group") or spec)


# Folders of lm-eval's task tree holding the paper tasks: indexing only these takes well under a second,
# against ~10-30 s for all ~10k built-in YAMLs. If lm-eval moves them, the full index is used instead.
_PAPER_TASK_DIRS = {"arc_challenge": "arc", "arc_easy": "arc", "hellaswag": "hellaswag",
                    "lambada_openai": "lambada", "openbookqa": "openbookqa", "piqa": "piqa"}


@functools.lru_cache(maxsize=8)
def _build_task_manager(paths: tuple[str, ...], include_defaults: bool):
    # A search scores many candidates, so each index is built once per process.
    # YAML files edited after the first call are not seen.
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=list(paths) or None, include_defaults=include_defaults)


def _task_manager(specs: Sequence[str | dict], include_path: str | None):
    import lm_eval.tasks

    names = [s for s in specs if isinstance(s, str)]
    local: tuple[str, ...] = ()
    if include_path is not None:
        if not os.path.isdir(include_path):
            raise ConfigError(f"include_path '{include_path}' is not a directory of lm-eval task YAML files")
        local = (os.path.abspath(include_path),)
    builtin = os.path.dirname(lm_eval.tasks.__file__)
    dirs = sorted({os.path.join(builtin, _PAPER_TASK_DIRS[n]) for n in names if n in _PAPER_TASK_DIRS})
    narrow = local + tuple(d for d in dirs if os.path.isdir(d))
    if narrow:
        tm = _build_task_manager(narrow, False)
        if all(n in tm.all_tasks for n in names):
            return tm
    tm = _build_task_manager(local, True)
    for n in names:
        if n not in tm.all_tasks:
            where = f" or under include_path '{include_path}'" if include_path else ""
            raise UnknownTaskError(
                f"unknown lm-eval task '{n}'.{did_you_mean(n, tm.all_tasks)} It is not built in{where}; "
                f"the paper's tasks are: {', '.join(PAPER_LM_TASKS)}"
            )
    return tm


def _load_task(tm, spec: str | dict) -> tuple[list, tuple[str, str] | None]:
    """Build one task/group, which loads its dataset -> (objects, None), or ([], (dataset, reason)) if unreadable."""
    name = _spec_name(spec)
    try:
        loaded = tm.load([spec])
    except OSError as e:  # ConnectionError (offline Hub), FileNotFoundError (local data_files), DatasetNotFoundError
        entry = tm.task_index.get(name) if isinstance(spec, str) else None
        cfg = (entry.cfg if entry is not None else spec if isinstance(spec, dict) else None) or {}
        dataset = str(cfg.get("dataset_path", "?"))
        if cfg.get("dataset_name"):
            dataset += f"' config '{cfg['dataset_name']}"
        return [], (dataset, f"{type(e).__name__}: {e}")
    if name in loaded["groups"]:
        return [loaded["groups"][name]], None
    return list(loaded["tasks"].values()), None  # a task, or the tasks a tag expands to


def _compact(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """lm-eval's ``{"acc,none": v, "acc_stderr,none": s, "alias": ...}`` -> ``{"acc": v}``; other filters keep ``metric,filter``."""
    out: dict[str, dict[str, float]] = {}
    for task, metrics in results.items():
        row = {}
        for key, value in metrics.items():
            if "," not in key or not is_number(value):
                continue
            metric, filt = key.split(",", 1)
            if metric.endswith("_stderr"):
                continue
            row[metric if filt == "none" else key] = float(value)
        out[task] = row
    return out


def run_lm_eval(
    model: nn.Module,
    tokenizer: Tokenizer,
    tasks: str | Sequence[str | dict],
    max_length: int,
    limit: int | float | None = None,
    include_path: str | None = None,
    batch_size: int = 8,
    device: torch.device | str | None = None,
    num_fewshot: int | None = None,
    autocast_dtype: torch.dtype | None = None,
) -> dict[str, dict[str, float]]:
    """Evaluate ``model`` on lm-eval ``tasks`` and return ``{task: {metric: value}}`` (no stderr, no samples).

    ``tasks``: built-in names (e.g. :data:`PAPER_LM_TASKS`), names of YAML tasks under ``include_path``,
    or inline config dicts. Every task is built (its dataset loaded) before any runs: an unknown name raises
    :class:`UnknownTaskError`, an unreachable dataset :class:`TaskDataUnavailable`. ``limit``: documents
    per task (int) or fraction (< 1), for quick runs.
    """
    import lm_eval

    specs = [tasks] if isinstance(tasks, (str, dict)) else list(tasks)
    if not specs:
        raise ConfigError(f"no lm-eval tasks given; e.g. tasks={PAPER_LM_TASKS}")
    tm = _task_manager(specs, include_path)
    built, missing = [], {}
    for spec in specs:
        objs, problem = _load_task(tm, spec)
        built += objs
        if problem:
            missing[_spec_name(spec)] = problem
    if missing:  # refuse a partial score: candidates must be compared on the same tasks
        raise TaskDataUnavailable(missing)
    lm = HlnasLM(model, tokenizer, max_length, batch_size=batch_size, device=device, autocast_dtype=autocast_dtype)
    res = lm_eval.simple_evaluate(
        model=lm, tasks=built, task_manager=tm, limit=limit, num_fewshot=num_fewshot,
        bootstrap_iters=0, log_samples=False,
    )
    if res is None:  # only non-zero ranks get None; HlnasLM is always rank 0
        raise HlnasError("lm_eval.simple_evaluate returned no results")
    return _compact(res["results"])
