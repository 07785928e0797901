"""A whole training step (forward, backward, clipping, AdamW) captured once as a CUDA graph and replayed.

Small proxy models are launch-bound on a GPU: a 24-layer d=256 step issues thousands of tiny kernels.
Capturing the step with ``torch.cuda.graph`` and replaying it ran 2.3-2.8x faster than eager on a GPU,
fla's Triton kernels inside (24-layer d=256 proxies at B=16).

:func:`make_step` returns ``step(inputs, targets) -> loss`` (a 0-d tensor; reading it synchronises, so
callers read it only at log points). On CPU, or when capture fails, the same function runs eagerly and
the reason is logged once. Shapes must stay fixed (static buffers), which fresh-model MQAR training
guarantees. The learning rate is a device tensor the caller sets with :func:`set_lr` before each step.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable

import torch
from torch import Tensor, nn

from hlnas.errors import ConfigError
from hlnas.model.kernels import backends

__all__ = ["compiled", "compile_module", "INDUCTOR_OPTIONS", "weight_decays", "make_optimizer", "make_step", "set_lr",
           "snapshot", "rewind"]

log = logging.getLogger("hlnas.training.step")
_WARNED: set[str] = set()
WARMUP_STEPS = 3  # eager steps on a side stream before capture (Triton autotune and allocations happen there)
_CAPTURE_LOCK = threading.Lock()  # graph captures of one process, one at a time (make_step)


def _warn_once(reason: str) -> None:
    if reason not in _WARNED:
        _WARNED.add(reason)
        log.warning("CUDA graph step not used: %s; running eagerly", reason)


def weight_decays(p: Tensor) -> bool:
    """Whether AdamW decays parameter ``p``: weight matrices, unless a mixer marks one ``_no_weight_decay`` (norms,
    biases and 1-d gates/decays never). The one rule of every hlnas optimizer."""
    return p.ndim >= 2 and not getattr(p, "_no_weight_decay", False)


def make_optimizer(model: nn.Module, lr: float, *, betas=(0.9, 0.98), weight_decay: float = 0.1,
                   graph: bool) -> torch.optim.AdamW:
    """AdamW as every hlnas training uses it: no weight decay on norms, biases and 1-d gates/decays (the usual
    LLM recipe; mixers mark decay-rate parameters such as A_log, dt_bias with ``_no_weight_decay``, as fla does);
    fused (CUDA and CPU), and with a tensor learning rate and ``capturable=True`` when the step will be captured."""
    dev = next(model.parameters()).device
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if weight_decays(p)], "weight_decay": weight_decay},
              {"params": [p for p in params if not weight_decays(p)], "weight_decay": 0.0}]
    cuda = dev.type == "cuda"
    if cuda and graph:
        return torch.optim.AdamW(groups, lr=torch.tensor(lr, device=dev), betas=betas, fused=True, capturable=True)
    # fused on CPU too (torch picks foreach, and only for CUDA tensors): one kernel per parameter. On CPU torch's foreach
    # ops are a C++ loop of the per-tensor ops (~10 a parameter); a small recall model's CPU step spent ~3 ms of ~45 in
    # that loop and ~0.5 ms fused (the CPU recall-step benchmark). The same AdamW within float rounding.
    fused = cuda or dev.type == "cpu"
    return torch.optim.AdamW(groups, lr=lr, betas=betas, fused=fused, foreach=None if fused else True)


def _inductor_options() -> dict:
    """Inductor settings every hlnas compile uses (see INDUCTOR_OPTIONS)."""
    import torch._inductor.config as inductor_config

    # Inductor types a Python float handed to a user-defined Triton kernel as fp64 (to keep its precision), where
    # Triton's own launcher types it fp32. fla's kernels multiply by such floats (`scale`) inside loops, and Triton
    # refuses a loop-carried value that turns fp64: on a GPU a compiled GLA layer at T <= 64 failed
    # in fused_recurrent_bwd_kernel ("b_dh has initial type fp32 but is re-assigned to fp64"). fp32, as in eager.
    flag = "_use_fp64_for_unbacked_floats"
    return {flag: False} if hasattr(inductor_config, flag) else {}


#: passed to torch.compile(options=) with the inductor backend (tests/test_compile_regions.py checks its effect)
INDUCTOR_OPTIONS = _inductor_options()


def compile_module(module: nn.Module, backend: str = "inductor") -> nn.Module:
    """``torch.compile(module)`` with :data:`INDUCTOR_OPTIONS` when the backend is inductor."""
    # fla's import and the other routing facts, probed eagerly now: the kernels probe on their first call, and inside
    # dynamo's trace importing fla failed, so every op went to the PyTorch kernels (backends._process_fact)
    backends.probe_process()
    options = INDUCTOR_OPTIONS if backend == "inductor" and INDUCTOR_OPTIONS else None
    return torch.compile(module, backend=backend, options=options)


def compiled(model: nn.Module, setting: bool | str, key: str) -> nn.Module:
    """``model`` as a step trains it: itself (``setting`` false), or under ``torch.compile`` (true: inductor, a string
    names the backend), block by block where the model lists its repeated blocks (:class:`RegionalCompiled`), else
    whole; parameters stay the model's own, so the optimizer and a saved state see no difference.
    ``key``: the setting's name (``train.compile``, ``score.mqar.compile``), for an unknown backend's error."""
    if not setting:
        return model
    backend = "inductor" if setting is True else setting
    try:
        if getattr(model, "compile_regions", None) is not None:
            return RegionalCompiled(model, backend)
        return compile_module(model, backend)
    except Exception as e:  # an unknown backend name: say which exist
        from torch._dynamo import list_backends

        raise ConfigError(f"{key}={setting!r}: {str(e).splitlines()[0]}. Allowed: true, false or one "
                          f"of {', '.join(list_backends(exclude_tags=()))}") from None


class RegionalCompiled(nn.Module):
    """``model`` with each of its repeated blocks (``model.compile_regions``) under torch.compile and the rest (the
    embedding, final norm and head) eager. The blocks share one compiled graph per mixer, where compiling the model
    whole traced and compiled all 24 of them: on the CPU the 24-layer recall model's first step took 6 s instead of
    49 s, at the same step time after (the compile-regions benchmark measures both on a GPU). The model's own
    ``__call__`` stays eager, so evaluation outside the step compiles nothing."""

    def __init__(self, model: nn.Module, backend: str):
        super().__init__()
        self.model = model
        # a plain list, not a ModuleList: each compiled wrapper holds a block that is already registered under model
        self.compiled_blocks = [compile_module(b, backend) for b in model.compile_regions]
        # dynamo compiles a block's code once per distinct block (a mixed model's kind ranges, a new shape), up to its
        # per-code recompile limit (8); past it the other blocks run uncompiled without a word. A mixer family's 24
        # blocks took 6 compiles of one frame on the CPU, so the limit covers every block, with room for shapes.
        import torch._dynamo.config as dynamo_config

        dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, len(self.compiled_blocks) + 8)

    def forward(self, *args, **kwargs):
        return self.model(*args, blocks=self.compiled_blocks, **kwargs)


def set_lr(opt: torch.optim.Optimizer, lr: float) -> None:
    for g in opt.param_groups:
        if isinstance(g["lr"], Tensor):
            g["lr"].fill_(lr)
        else:
            g["lr"] = lr


def snapshot(model: nn.Module, opt: torch.optim.Optimizer) -> tuple[dict, dict]:
    """Copies of the model's parameters and buffers and of the optimizer's state tensors, for :func:`rewind`."""
    params = {k: v.detach().clone() for k, v in model.state_dict(keep_vars=False).items()}
    state = {id(p): {k: (v.detach().clone() if isinstance(v, Tensor) else v) for k, v in st.items()}
             for p, st in opt.state.items()}
    return params, state


def rewind(model: nn.Module, opt: torch.optim.Optimizer, saved: tuple[dict, dict]) -> None:
    """Put the model and optimizer back to ``saved`` **in place** (a captured graph keeps reading and writing the
    same storage); optimizer state created since (a fresh AdamW's moments) is zeroed, which is what a fresh
    optimizer's first step starts from."""
    params, state = saved
    with torch.no_grad():
        for k, v in model.state_dict(keep_vars=False).items():
            v.copy_(params[k])
        for p, st in opt.state.items():
            old = state.get(id(p), {})
            for k, v in st.items():
                if isinstance(v, Tensor):
                    v.copy_(old[k]) if k in old else v.zero_()
                elif k in old:
                    st[k] = old[k]


def _capture(body: Callable[[], Tensor]) -> tuple[torch.cuda.CUDAGraph, Tensor] | None:
    """:data:`WARMUP_STEPS` eager calls of ``body`` on a side stream, then one captured: ``(graph, its loss tensor)``,
    or None (the reason logged once) where capture fails."""
    try:
        # one capture at a time in a process: torch.cuda.graph syncs the device and empties the allocator's cache on
        # entry, which must not happen inside another run's capture (on a GPU, 12 runs capturing at once in one
        # worker failed with "operation not permitted when stream is capturing"); the other runs go on replaying
        with _CAPTURE_LOCK:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(WARMUP_STEPS):
                    body()
            torch.cuda.current_stream().wait_stream(side)
            g = torch.cuda.CUDAGraph()
            # a capture stream of its own (torch's default one is shared by every capture of the process), and
            # thread_local: runs sharing a worker process, each on its own stream, go on launching while this one
            # captures; the default ("global") mode would fail their allocations and syncs
            with torch.cuda.graph(g, stream=torch.cuda.Stream(), capture_error_mode="thread_local"):
                static_loss = body()
    except Exception as e:  # a kernel that syncs, allocates on the host or is not capturable
        _warn_once(f"capture failed ({type(e).__name__}: {str(e).splitlines()[0][:160]})")
        return None
    return g, static_loss


def make_step(model: nn.Module, opt: torch.optim.Optimizer, loss_fn: Callable[[Tensor, Tensor], Tensor],
              example: tuple[Tensor, Tensor], *, graph: bool = True, clip: float = 1.0,
              autocast: torch.dtype | None = None, rewind_warmup: bool = False,
              model_kwargs: dict | None = None) -> tuple[Callable[[Tensor, Tensor], Tensor], str]:
    """``(step, mode)``: ``step(x, y)`` runs one optimizer step on batch ``x``/``y`` (shapes of ``example``)
    and returns the loss tensor; ``mode`` is ``"graph"`` or ``"eager"``.

    Capture trains :data:`WARMUP_STEPS` eager steps and one captured step on ``example``. The recall proxy counts
    them as steps; with ``rewind_warmup`` they leave no trace (model and optimizer are put back, :func:`rewind`), so
    the first ``step`` call is the run's first step, as in eager mode (the LM trainer). ``model_kwargs``: passed to
    every ``model(x, ...)`` call (``head=False`` where ``loss_fn`` applies the LM head itself)."""
    dev = example[0].device
    params = [p for p in model.parameters() if p.requires_grad]
    kw = model_kwargs or {}

    def ctx():
        if autocast is None:
            return contextlib.nullcontext()
        # the autocast weight cache would hold casts from capture time: off under graphs
        return torch.autocast(dev.type, dtype=autocast, cache_enabled=False)

    def one_step(x: Tensor, y: Tensor, captured: bool) -> Tensor:
        with ctx():
            loss = loss_fn(model(x, **kw), y)
        loss.backward()
        # under capture: the foreach norm (no host sync), and grads keep their storage (the graph reads and writes it
        # in place)
        torch.nn.utils.clip_grad_norm_(params, clip, foreach=True if captured else None)
        opt.step()
        opt.zero_grad(set_to_none=not captured)
        return loss.detach()

    def eager(x: Tensor, y: Tensor) -> Tensor:
        return one_step(x, y, captured=False)

    if dev.type != "cuda" or not graph:
        return eager, "eager"
    capturable = all(g.get("capturable", False) for g in opt.param_groups)
    if not capturable:
        _warn_once("the optimizer was not built with capturable=True")
        return eager, "eager"
    static_x, static_y = example[0].clone(), example[1].clone()

    def body() -> Tensor:
        return one_step(static_x, static_y, captured=True)

    saved = snapshot(model, opt) if rewind_warmup else None
    captured = _capture(body)
    if captured is None:
        opt.zero_grad(set_to_none=True)
        if saved is not None:
            rewind(model, opt, saved)
        return eager, "eager"
    g, static_loss = captured
    if saved is not None:
        torch.cuda.current_stream().synchronize()  # the warm-up steps are done (capture itself runs nothing)
        rewind(model, opt, saved)

    def replay(x: Tensor, y: Tensor) -> Tensor:
        static_x.copy_(x, non_blocking=True)
        static_y.copy_(y, non_blocking=True)
        g.replay()
        return static_loss

    return replay, "graph"
