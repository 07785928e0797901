"""A training's state on disk, written atomically and read back in place.

Two kinds, each in the layout its readers expect: the LM trainer's checkpoint (:func:`save_checkpoint`,
:func:`resume`; keys ``model``, ``optim``, ``step``, ``losses``, ``meta``) and a paused recall run's state
(:func:`save_run_state`, :func:`load_run_state`; keys ``model``, ``opt`` and the run's own). Both go through
:func:`save_state`: written beside the target and moved over it, so a run killed while saving leaves the previous
state whole, and a save that fails (a full disk) leaves no partial file behind.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from hlnas.errors import DiskFull, HlnasError, no_room

__all__ = ["save_state", "save_run_state", "load_run_state", "save_checkpoint", "resume"]


def save_state(path: str | os.PathLike, state: dict) -> None:
    """``state`` to ``path``, atomically (the previous file stays whole until the new one is complete). A write that
    finds no room raises :class:`~hlnas.errors.DiskFull` naming ``path``; the partial ``.tmp`` is removed."""
    tmp = f"{path}.tmp"
    try:
        # through a Python file: torch's own file writer reports a full disk only as "unexpected pos", without errno
        with open(tmp, "wb") as f:
            torch.save(state, f)
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.remove(tmp)
        except OSError:
            pass
        full = no_room(e)
        if full is not None:
            raise DiskFull(path, full) from None
        raise


def save_run_state(path: str, model, opt, state: dict) -> None:
    """A paused recall run: ``state`` beside its model's and optimizer's."""
    save_state(path, {**state, "model": model.state_dict(), "opt": opt.state_dict()})


def load_run_state(path: str, model, opt) -> dict:
    """Copy a state saved by :func:`save_run_state` into ``model`` and ``opt`` in place (a captured CUDA graph keeps
    its tensors); the whole state is returned."""
    saved = torch.load(path, map_location="cpu", weights_only=False)
    with torch.no_grad():
        for k, v in model.state_dict().items():
            v.copy_(saved["model"][k])
    params = [p for g in opt.param_groups for p in g["params"]]
    for i, p in enumerate(params):
        for k, v in saved["opt"]["state"].get(i, {}).items():
            cur = opt.state[p].get(k)
            if isinstance(cur, torch.Tensor) and isinstance(v, torch.Tensor):
                cur.copy_(v)
            else:
                opt.state[p][k] = v.to(p.device) if isinstance(v, torch.Tensor) and k != "step" else v
    return saved


def save_checkpoint(path: Path, model, opt, step: int, losses, meta: dict) -> None:
    """The LM trainer's checkpoint after ``step`` steps (``meta``: the run's layout and configs)."""
    save_state(path, {"model": model.state_dict(), "optim": opt.state_dict(), "step": step, "losses": losses, "meta": meta})


def resume(ckpt: Path | None, layout, cfg, model, opt, device) -> tuple[int, list | None]:
    """``(steps done, losses logged)`` of ``ckpt``'s run, loaded into ``model`` and ``opt``; ``(0, None)`` without one.
    A checkpoint of another layout or training config (``cfg``, read back with its ``from_dict``) is refused. The
    checkpoint's folder is made, for the run to save into."""
    start, losses = 0, None
    if ckpt is not None and ckpt.exists():
        state = torch.load(ckpt, map_location=device, weights_only=False)
        if state["meta"]["layout"] != str(layout) or type(cfg).from_dict(state["meta"]["train"]) != cfg:
            raise HlnasError(f"checkpoint {ckpt} belongs to another run (layout {state['meta']['layout']}); use a new out_dir")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
        start, losses = state["step"], [tuple(x) for x in state["losses"]]
    if ckpt is not None:
        ckpt.parent.mkdir(parents=True, exist_ok=True)
    return start, losses
