"""R models of one layout as one model: stacked weights, the replicas folded into the batch (issue #21).

A 24-layer d=128 recall model at batch 64 keeps an H200 at ~1% of its FLOP limit (tiny, launch-bound kernels);
one process at 12x the batch ran 1.6-1.9x 12 processes side by side (reference/deep-recall-control.md section 3).
:func:`replicate` turns R models of the same layout (each built the normal way with its own seed) into one
:class:`ReplicatedLM` whose forward on ``[R*B, T]`` ids (replica-major: rows ``r*B .. r*B+B-1`` are replica r's)
gives, in each replica's rows, what that replica's model gives alone. Every parameterised module of an hlnas model
has a replicated form here:

* ``nn.Linear`` (every projection, the MLPs, the LM head, GLA's low-rank gate ``gk_proj``) -> :class:`ReplicatedLinear`,
  one batched matmul over ``[R, B*T, C]``;
* ``nn.Embedding`` -> :class:`ReplicatedEmbedding`, one table per replica (a tied LM head shares it);
* :class:`~hlnas.model.mixers.short_conv.ShortConvolution` (the mixers' short convs, attention's input conv, Mamba-2's conv1d) ->
  per-replica taps on CPU, the replicas folded into the channels (groups) of one ``conv1d`` elsewhere;
* the norms (:class:`~hlnas.model.nn.RMSNorm`, :class:`~hlnas.model.nn.GatedRMSNorm`, Mamba-2's grouped gated norm): their
  ``_scale`` hook applies each replica's weight to its rows;
* bare parameters a mixer uses in its math (those its class lists as ``bare_parameters``: HGRN's ``lower_bound_w``,
  HGRN-2's ``lower_bound``, Gated DeltaNet's and Mamba-2's ``A_log``/``dt_bias``, Mamba-2's ``D``): read through a
  parametrization as one row per sequence, ``[R*B, 1, *shape]``, which broadcasts against the ``[B, T, *shape]``
  activations they act on.

The weight-free sequence kernels (hlnas.model.kernels: attention, GLA, HGRN, simple GLA, the delta rules), RoPE and the
activations take the folded batch as it is: no op of an hlnas model mixes batch rows. A module with parameters not
listed above is refused by name (:class:`ReplicaError`).

Storage: all weights live in one ``[R, N]`` tensor (:attr:`ReplicatedLM.flat`, replica r in row r, each solo
parameter at a fixed column range starting on a :data:`SLOT_BYTES` boundary, the gaps zero), the parameters are views
of it, and their gradients views of one ``[R, N]`` gradient (:attr:`ReplicatedLM.flat_grad`). So per-replica
clipping, the AdamW update with per-replica learning rates, freezing a replica, and loading fresh weights into a slot
are single ops on rows (:mod:`hlnas.training.replica_step`). Gradients must be zeroed in place (``flat_grad.zero_()``),
never set to None.
Training only: no decode cache.
"""

from __future__ import annotations

import copy
import warnings

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils import parametrize

import hlnas.model.kernels.causal_conv1d as causal_conv
from hlnas.errors import ConfigError
from hlnas.model.mixers.short_conv import ShortConvolution
from hlnas.training.step import weight_decays

__all__ = ["ReplicaError", "ReplicatedLM", "ReplicatedLinear", "ReplicatedEmbedding", "replicate"]


# the parameters are views of one [R, N] storage, their gradients views of another, on purpose (one op per update):
# autograd accumulates into them in place and says each time that such strides "may impair performance"
warnings.filterwarnings("ignore", message="grad and param do not obey the gradient layout contract")

#: Each parameter's column range in :attr:`ReplicatedLM.flat` (and each row) starts on a multiple of this many bytes:
#: kernels read 16-byte vectors and Hopper's tensor-memory loads want 16-byte aligned bases; 64 covers both with room.
SLOT_BYTES = 64


class ReplicaError(ConfigError):
    """A model that cannot be replicated (a module or parameter with no replicated form, models that differ)."""


class _Fold:
    """What the replicated modules share: the number of replicas, and the per-replica batch of the current forward."""

    def __init__(self, replicas: int):
        self.replicas, self.batch = replicas, 1


class ReplicatedLinear(nn.Module):
    """R ``nn.Linear`` as one batched matmul: ``x [R*B, ..., in]`` -> ``[R*B, ..., out]``, replica r's rows through
    its own ``weight[r]`` (``[R, out, in]``) and ``bias[r]``."""

    def __init__(self, weight: nn.Parameter, bias: nn.Parameter | None):
        super().__init__()
        self.weight, self.bias = weight, bias

    def forward(self, x: Tensor) -> Tensor:
        R = self.weight.shape[0]
        xr = x.reshape(R, -1, x.shape[-1])
        wt = self.weight.transpose(1, 2)
        y = torch.bmm(xr, wt) if self.bias is None else torch.baddbmm(self.bias.unsqueeze(1), xr, wt)
        return y.reshape(*x.shape[:-1], y.shape[-1])


class ReplicatedEmbedding(nn.Module):
    """R embedding tables ``[R, V, C]``: replica r's rows of ``ids [R*B, T]`` look up table r."""

    def __init__(self, weight: nn.Parameter):
        super().__init__()
        self.weight = weight

    def forward(self, ids: Tensor) -> Tensor:
        R = self.weight.shape[0]
        rows = torch.arange(R, device=ids.device).repeat_interleave(ids.shape[0] // R)
        return self.weight[rows[:, None], ids]


def _replicated_scale(self, y: Tensor, w: Tensor) -> Tensor:
    """A norm's ``_scale`` with ``w [R, C]``: replica r's rows of ``y [R*B, ..., C]`` times ``w[r]``."""
    R = w.shape[0]
    return (y.reshape(R, -1, y.shape[-1]) * w[:, None, :]).reshape(y.shape)


class ReplicatedShortConvolution(ShortConvolution):
    """:class:`~hlnas.model.mixers.short_conv.ShortConvolution` with ``weight [R, C, 1, size]`` (and ``bias [R, C]``) on ``[R*B, T, C]``.

    CPU float, and under ``torch.compile`` (which fuses them; :mod:`hlnas.model.kernels.causal_conv1d`): the solo module's
    shifted multiply-adds, each replica's taps on its rows (the same elementwise ops, so the same numbers).
    Elsewhere (or with ``use_conv1d``): the replicas folded into the channels of one depthwise ``conv1d`` with
    ``R*C`` groups."""

    use_conv1d = False  # tests set it to check the conv1d path on CPU

    def forward(self, x: Tensor, cache: dict | None = None, key: str = "conv") -> Tensor:
        if cache is not None:
            raise ReplicaError("a replicated model trains only: it has no decode cache")
        R, size = self.weight.shape[0], self.size
        N, T, C = x.shape
        B = N // R
        xx = torch.cat([x.new_zeros(N, size - 1, C), x], dim=1).view(R, B, T + size - 1, C)
        w = self.weight.to(x.dtype)
        b = None if self.bias is None else self.bias.to(x.dtype)
        cpu_float = x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64) and not self.use_conv1d
        if cpu_float or (causal_conv.SHIFTED_SUM_UNDER_COMPILE and torch.compiler.is_compiling()):
            wk = w[:, :, 0, :]  # [R, C, size]
            y = xx[:, :, 0:T] * wk[:, None, None, :, 0]
            for k in range(1, size):
                y = y + xx[:, :, k : k + T] * wk[:, None, None, :, k]
            if b is not None:
                y = y + b[:, None, None, :]
            y = y.reshape(N, T, C)
        else:
            xc = xx.permute(1, 0, 3, 2).reshape(B, R * C, T + size - 1)
            y = F.conv1d(xc, w.reshape(R * C, 1, size), None if b is None else b.reshape(R * C), groups=R * C)
            y = y.view(B, R, C, T).permute(1, 0, 3, 2).reshape(N, T, C)
        if self.activation == "silu":
            y = F.silu(y)
        return y


class _PerRow(nn.Module):
    """Parametrization of a bare mixer parameter ``[R, *shape]`` as ``[R*B, 1, *shape]``: each sequence's row of its
    replica, broadcasting against the mixer's ``[R*B, T, *shape]`` activations as ``[*shape]`` does against
    ``[B, T, *shape]``."""

    def __init__(self, fold: _Fold):
        super().__init__()
        self.fold = fold

    def forward(self, stacked: Tensor) -> Tensor:
        return stacked.repeat_interleave(self.fold.batch, dim=0).unsqueeze(1)


_SWAPPED: dict[type, type] = {}


def _with_replicated_scale(cls: type) -> type:
    """``cls`` with :func:`_replicated_scale` as its ``_scale`` (one subclass per norm class)."""
    if cls not in _SWAPPED:
        _SWAPPED[cls] = type(f"Replicated{cls.__name__}", (cls,), {"_scale": _replicated_scale})
    return _SWAPPED[cls]


class ReplicatedLM(nn.Module):
    """R models of one layout as one (see the module doc). Build it with :func:`replicate`."""

    def __init__(self, models: list[nn.Module]):
        super().__init__()
        if not models:
            raise ReplicaError("replicate needs at least one model")
        first = models[0]
        R = len(models)
        solo = [dict(m.named_parameters()) for m in models]  # tied weights once, under their first name
        shapes = {k: tuple(p.shape) for k, p in solo[0].items()}
        for i, s in enumerate(solo[1:], 1):
            if {k: tuple(p.shape) for k, p in s.items()} != shapes or str(getattr(models[i], "layout", "")) != str(
                getattr(first, "layout", "")
            ):
                raise ReplicaError(f"replicate: model {i} is not of model 0's layout and shapes")
        p0 = next(iter(solo[0].values()))
        self.replicas, self.fold = R, _Fold(R)
        self.names = list(solo[0])  # solo parameter names, in the order of their column ranges in flat
        sizes = [solo[0][k].numel() for k in self.names]
        # each parameter's columns start on a SLOT_BYTES boundary, and so does each row: GatedDeltaNet with one head
        # has 1-element parameters (A_log, dt_bias), and packed tight the views after them began 4 bytes off; on the
        # H100 the compiled replicated step then died of a misaligned address (2026-12-06)
        align = max(1, SLOT_BYTES // p0.element_size())
        self.offsets, self.ends = [], []
        at = 0
        for n in sizes:
            self.offsets.append(at)
            self.ends.append(at + n)
            at += -(-n // align) * align
        N, self._n_params = at, sum(sizes)
        self.flat = torch.zeros(R, N, dtype=p0.dtype, device=p0.device)  # the padding stays 0, its gradient too
        self.flat_grad = torch.zeros_like(self.flat)
        # weight decay as hlnas.training.step.make_optimizer decides it on the solo parameter: matrices, unless marked
        self.decays = torch.zeros(N, dtype=torch.bool, device=p0.device)
        self.stacked: dict[str, nn.Parameter] = {}
        by_id: dict[int, nn.Parameter] = {}
        for k, lo, hi in zip(self.names, self.offsets, self.ends):
            p = nn.Parameter(self.flat[:, lo:hi].view(R, *shapes[k]))
            p.grad = self.flat_grad[:, lo:hi].view(R, *shapes[k])
            self.stacked[k] = by_id[id(solo[0][k])] = p
            self.decays[lo:hi] = weight_decays(solo[0][k])
        self.columns = dict(zip(self.names, zip(self.offsets, self.ends)))  # name -> its [lo, hi) in a row
        for r, m in enumerate(models):
            self._copy_in(r, m, {k: k for k in self.names})
        self.inner = copy.deepcopy(first)
        self._swap(first, by_id)
        self.layout, self.cfg = getattr(first, "layout", None), getattr(first, "cfg", None)

    def _swap(self, first: nn.Module, by_id: dict[int, nn.Parameter]) -> None:
        """Replace every parameterised module of ``inner`` (a copy of ``first``) by its replicated form."""
        rep_modules = dict(self.inner.named_modules())
        for name, solo_mod in first.named_modules():
            direct = dict(solo_mod.named_parameters(recurse=False))
            if not direct:
                continue
            mod = rep_modules[name]
            stacked = {k: by_id[id(p)] for k, p in direct.items()}
            parent_name, _, child = name.rpartition(".")
            parent = rep_modules[parent_name] if name else None
            t = type(solo_mod)
            what = f"{name or 'model'} ({t.__name__})"
            if t is nn.Linear:
                setattr(parent, child, ReplicatedLinear(stacked["weight"], stacked.get("bias")))
            elif t is nn.Embedding:
                if solo_mod.padding_idx is not None or solo_mod.max_norm is not None or solo_mod.sparse:
                    raise ReplicaError(f"replicate: {what} uses padding_idx, max_norm or sparse, which have no replicated form")
                setattr(parent, child, ReplicatedEmbedding(stacked["weight"]))
            elif t is ShortConvolution:
                mod.__class__ = ReplicatedShortConvolution
                for k, p in stacked.items():
                    setattr(mod, k, p)
            elif callable(getattr(solo_mod, "_scale", None)) and set(direct) == {"weight"} and solo_mod.weight.ndim == 1:
                mod.__class__ = _with_replicated_scale(t)
                mod.weight = stacked["weight"]
            elif hasattr(solo_mod, "bare_parameters"):  # a mixer (hlnas.model.mixers.base.Mixer), which lists them
                extra = sorted(set(direct) - set(solo_mod.bare_parameters))
                if extra:
                    raise ReplicaError(f"replicate: mixer '{solo_mod.name}' ({name}) has parameters {extra} with no "
                                       "replicated form (not among its class's bare_parameters)")
                for k, p in stacked.items():
                    setattr(mod, k, p)
                    parametrize.register_parametrization(mod, k, _PerRow(self.fold), unsafe=True)
            else:
                raise ReplicaError(f"replicate: {what} has parameters {sorted(direct)} with no replicated form")
        for k, p in self.inner.named_parameters():  # every weight is a view of flat
            if p.untyped_storage().data_ptr() != self.flat.untyped_storage().data_ptr():
                raise ReplicaError(f"replicate: parameter {k} was left out of the replicated storage")

    @property
    def compile_regions(self) -> nn.ModuleList:
        """The replicated blocks, for :func:`hlnas.training.step.compiled` (as :attr:`HybridLM.compile_regions`)."""
        return self.inner.compile_regions

    def forward(self, input_ids: Tensor, blocks=None) -> Tensor:
        """``input_ids [R*B, T]`` (replica-major) -> logits ``[R*B, T, vocab]``; ``blocks`` as in
        :meth:`HybridLM.forward`."""
        n = input_ids.shape[0]
        if n % self.replicas:
            raise ReplicaError(f"a batch of {n} rows does not split into {self.replicas} replicas")
        self.fold.batch = n // self.replicas
        with parametrize.cached():  # each bare parameter expanded once per forward
            return self.inner(input_ids, blocks=blocks)

    # -- one replica's weights -------------------------------------------------------------------------------------
    # -- one replica's weights, under the names of the solo model it trains ------------------------------------------
    def _names_of(self, model: nn.Module) -> dict[str, str]:
        """``model``'s parameter names (a solo model of this layout) -> this model's (here the same)."""
        names = [n for n, _ in model.named_parameters()]
        if set(names) != set(self.names):
            raise ReplicaError("load_replica: the model's parameters are not this layout's")
        return {n: n for n in names}

    def _solo_names(self, r: int) -> dict[str, str]:
        """The parameter names of the solo model slot ``r`` trains -> this model's (here the same)."""
        return {n: n for n in self.names}

    def _copy_in(self, r: int, model: nn.Module, names: dict[str, str]) -> None:
        params = dict(model.named_parameters())
        with torch.no_grad():
            for n, u in names.items():
                self.stacked[u][r].copy_(params[n])

    def replica_state(self, r: int) -> dict[str, Tensor]:
        """Replica ``r``'s weights under the solo model's parameter names (views of :attr:`flat`)."""
        return {n: self.stacked[u][r] for n, u in self._solo_names(r).items()}

    def load_replica(self, r: int, model: nn.Module) -> None:
        """Copy ``model``'s weights (a solo model of this layout) into replica ``r``, in place (a captured graph
        keeps reading the same storage)."""
        self._copy_in(r, model, self._names_of(model))

    @torch.no_grad()
    def to_solo(self, r: int, model: nn.Module) -> nn.Module:
        """Copy replica ``r``'s weights into ``model`` (a solo model of this layout) and return it."""
        params = dict(model.named_parameters())
        for n, u in self._names_of(model).items():
            params[n].copy_(self.stacked[u][r])
        return model

    def num_params(self) -> int:
        """Parameters of one replica (without the padding between them)."""
        return self._n_params

    # -- one replica's row of a [R, N] optimizer tensor, as a paused run keeps it ---------------------------------------
    def row_state(self, r: int, row: Tensor) -> dict[str, Tensor]:
        """Replica ``r``'s ``row`` (``[N]``, its row of an optimizer moment) by solo parameter name, on the CPU: what a
        paused run keeps, so it can continue in any replicated model that holds its layout (one of a single layout or
        a mixed one, whose columns differ)."""
        return {n: row[slice(*self.columns[u])].detach().cpu().clone() for n, u in self._solo_names(r).items()}

    @torch.no_grad()
    def load_row_state(self, r: int, row: Tensor, saved) -> None:
        """Put :meth:`row_state`'s ``saved`` back into ``row`` for the run slot ``r`` trains (other columns: 0)."""
        if isinstance(saved, Tensor):  # kept whole by the code before 2026-12-06: this model's own columns
            row.copy_(saved)
            return
        row.zero_()
        for n, u in self._solo_names(r).items():
            row[slice(*self.columns[u])].copy_(saved[n])

def replicate(models: list[nn.Module]) -> ReplicatedLM:
    """One :class:`ReplicatedLM` of ``models`` (same layout and config, any seeds), on their device."""
    return ReplicatedLM(list(models))
