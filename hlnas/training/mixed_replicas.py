"""Replicas of *different* layouts of one depth as one model (issue #21; #20 point 7, a recall GPU-second's cost).

:mod:`hlnas.training.replicas` stacks R models of one layout. The grid's and the calibration's layouts come in
families that differ only in which layers are attention: GLA pure, 24:1, ..., 3:1 are the same model but for the
mixer at a few layers. :class:`MixedReplicatedLM` puts runs of such layouts into one replicated model, so one step
trains a whole family's runs (and a slot freed by a run that stopped takes a run of *any* of them).

How: at each layer ``i`` the model holds every mixer kind that one of the layouts it takes (``layouts``) has there,
in a :class:`RoutedMixer`. It applies each kind to every row and keeps, in each replica's rows, the output of that
replica's own kind (``torch.where`` on a per-replica route, a buffer: static shapes, so the step can be captured once
and a slot can change layout between steps). Each replica's rows therefore go through exactly the ops of its solo
model, and a kind that is not its own gets a zero gradient in its rows: its weights in that replica take no part
(AdamW's decay shrinks them, harmlessly). The other kinds' weights in a replica are copies of one template mixer per
layer and kind (drawn from seed 0, outside the global random state).

The cost: a layer where the layouts differ runs each of its kinds on all rows. The recall step is launch-bound (a
24-layer d=128 model at ~2% of the FLOP limit), so a family of 10 runs sharing one step with some layers run twice
is expected to beat 10 models of 1-2 replicas; ``experiments/bench/proxy_throughput.py --modes replicas_mixed``
measures it against the same runs as processes.

Parameter names: replica ``r``'s weights are reported and loaded under its solo model's names
(:meth:`MixedReplicatedLM.replica_state`, :meth:`~MixedReplicatedLM.load_replica`, :meth:`~MixedReplicatedLM.to_solo`);
``blocks.{i}.mixer.{name}`` of a solo model is ``blocks.{i}.mixer.mixers.{kind}.{name}`` of the union.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from hlnas.layout import Layout
from hlnas.training.replicas import ReplicaError, ReplicatedLM

__all__ = ["MixedReplicatedLM", "RoutedMixer", "replicate_mixed"]


class RoutedMixer(nn.Module):
    """One layer's mixer kinds (``mixers``, a kind name each); replica ``r``'s rows take the output of kind
    ``route[r]``. ``fold`` (the replicated model's) gives the per-replica batch of the current forward."""

    def __init__(self, mixers: dict[str, nn.Module], replicas: int):
        super().__init__()
        self.kinds = sorted(mixers)
        self.mixers = nn.ModuleDict({k: mixers[k] for k in self.kinds})
        self.register_buffer("route", torch.zeros(replicas, dtype=torch.long), persistent=False)
        self.fold = None  # the replicated model's (its replicas and the per-replica batch), set when it is built

    def forward(self, x: Tensor, cache: dict | None = None) -> Tensor:
        if cache is not None:
            raise ReplicaError("a replicated model trains only: it has no decode cache")
        if len(self.kinds) == 1:
            return self.mixers[self.kinds[0]](x, None)
        rows = self.route.repeat_interleave(self.fold.batch)[:, None, None]  # [R*B, 1, 1]: each row's kind
        out = None
        for j, k in enumerate(self.kinds):
            y = self.mixers[k](x, None)
            # where, not a 0/1 product: another kind's output in these rows never reaches them, not even as 0 * inf
            out = y if out is None else torch.where(rows == j, y, out)
        return out


def _union_name(name: str, layout: Layout) -> str:
    """A solo parameter name as the union model names it (its layer's mixer under its kind)."""
    parts = name.split(".")
    if len(parts) > 3 and parts[0] == "blocks" and parts[2] == "mixer":
        return ".".join([*parts[:3], "mixers", layout.mixers[int(parts[1])], *parts[3:]])
    return name


def _kinds_per_layer(layouts: Sequence[Layout]) -> list[list[str]]:
    depth = {lay.n_layers for lay in layouts}
    if len(depth) != 1:
        raise ReplicaError(f"replicate_mixed: layouts of one depth only, got depths {sorted(depth)}")
    return [sorted({lay.mixers[i] for lay in layouts}) for i in range(depth.pop())]


def _templates(model: nn.Module, layouts: Sequence[Layout], kinds: list[list[str]]) -> list[dict[str, nn.Module]]:
    """One mixer per layer and kind, from a model of a layout that has that kind there, built as ``model`` is (its
    config, HybridLM's init) from seed 0 outside the global random state: what a replica's union model holds for
    the kinds that are not its own."""
    from hlnas.model import HybridLM

    out: list[dict[str, nn.Module]] = [{} for _ in kinds]
    device = next(model.parameters()).device
    with torch.random.fork_rng(devices=[]):
        for lay in layouts:
            if all(lay.mixers[i] in out[i] for i in range(len(kinds))):
                continue
            torch.manual_seed(0)
            built = HybridLM(lay, model.cfg).to(device)
            for i, block in enumerate(built.blocks):
                out[i].setdefault(lay.mixers[i], block.mixer)
    return out


def _union_model(model: nn.Module, kinds: list[list[str]], templates, replicas: int, tag: str) -> nn.Module:
    """A copy of ``model`` whose every block's mixer is a :class:`RoutedMixer` of that layer's ``kinds``: its own
    mixer (its weights) under its kind, copies of the templates under the others."""
    u = copy.deepcopy(model)
    for i, block in enumerate(u.blocks):
        own = model.layout.mixers[i]
        block.mixer = RoutedMixer({k: block.mixer if k == own else copy.deepcopy(templates[i][k]) for k in kinds[i]},
                                  replicas)
    u.layout = tag  # ReplicatedLM checks its models share a layout: they share the union
    return u


class MixedReplicatedLM(ReplicatedLM):
    """R models of layouts of one depth and config as one model (see the module doc). Build it with
    :func:`replicate_mixed`. :attr:`slot_layouts` says which layout each replica trains now."""

    def __init__(self, models: list[nn.Module], layouts: Sequence[Layout] | None = None):
        if not models:
            raise ReplicaError("replicate_mixed needs at least one model")
        takes = list(dict.fromkeys([*(m.layout for m in models), *(layouts or ())]))
        kinds = _kinds_per_layer(takes)
        if len({repr(m.cfg) for m in models}) != 1:
            raise ReplicaError("replicate_mixed: the models differ in their config (d_model, MLP width, mixer settings), "
                               "not only in their layouts")
        tag = "mixed:" + "|".join(str(lay) for lay in takes)
        templates = _templates(models[0], takes, kinds)
        R = len(models)
        super().__init__([_union_model(m, kinds, templates, R, tag) for m in models])
        self.takes, self.kinds = takes, kinds
        self.routers = [m for m in self.inner.modules() if isinstance(m, RoutedMixer)]
        for m in self.routers:
            m.fold = self.fold
        self.slot_layouts: list[Layout] = [m.layout for m in models]
        self._solo: dict[Layout, dict[str, str]] = {}
        for r, m in enumerate(models):
            self._route(r, m.layout)
            self._solo_map(m)

    @torch.no_grad()
    def _route(self, r: int, layout: Layout) -> None:
        if layout not in self.takes:
            raise ReplicaError(f"this mixed replicated model takes layouts {', '.join(map(str, self.takes))}; "
                               f"got {layout} (give it among replicate_mixed's layouts)")
        for i, m in enumerate(self.routers):
            m.route[r] = m.kinds.index(layout.mixers[i])
        self.slot_layouts[r] = layout

    def _solo_map(self, model: nn.Module) -> dict[str, str]:
        """``model``'s parameter names -> the union's (kept per layout for :meth:`replica_state`)."""
        mapped = {n: _union_name(n, model.layout) for n, _ in model.named_parameters()}
        missing = [u for u in mapped.values() if u not in self.stacked]
        if missing:
            raise ReplicaError(f"model of layout {model.layout} has parameters {missing[:3]} this mixed model does not hold")
        self._solo[model.layout] = mapped
        return mapped

    @torch.no_grad()
    def load_replica(self, r: int, model: nn.Module) -> None:
        """Replica ``r`` becomes ``model`` (a solo model of one of :attr:`takes`): its weights, and its route."""
        if isinstance(getattr(model, "layout", None), str):  # a union model, while the storage is built
            return super().load_replica(r, model)
        self._route(r, model.layout)
        params = dict(model.named_parameters())
        for n, u in self._solo_map(model).items():
            self.stacked[u][r].copy_(params[n])

    def replica_state(self, r: int) -> dict[str, Tensor]:
        """Replica ``r``'s weights under its solo model's names (its current layout's parameters only)."""
        return {n: self.stacked[u][r] for n, u in self._solo[self.slot_layouts[r]].items()}

    @torch.no_grad()
    def to_solo(self, r: int, model: nn.Module) -> nn.Module:
        """Copy replica ``r``'s weights into ``model`` (a solo model of the layout slot ``r`` trains) and return it."""
        if model.layout != self.slot_layouts[r]:
            raise ReplicaError(f"to_solo: slot {r} trains {self.slot_layouts[r]}, not {model.layout}")
        params = dict(model.named_parameters())
        for n, u in self._solo_map(model).items():
            params[n].copy_(self.stacked[u][r])
        return model


    def row_state(self, r: int, row: Tensor) -> dict[str, Tensor]:
        """Replica ``r``'s ``row`` by its solo parameter names (on the CPU): a paused run continues in a mixed model of
        another layout set, whose columns differ."""
        cols = dict(zip(self.names, zip(self.offsets, self.ends)))
        return {n: row[cols[u][0]:cols[u][1]].detach().cpu().clone() for n, u in self._solo[self.slot_layouts[r]].items()}

    @torch.no_grad()
    def load_row_state(self, r: int, row: Tensor, saved) -> None:
        """Put :meth:`row_state`'s ``saved`` back into ``row`` for the run slot ``r`` trains (its other columns: 0)."""
        if not isinstance(saved, dict):
            raise ReplicaError("a paused run's optimizer state kept by a one-layout replicated model cannot continue in "
                               "a mixed one")
        cols = dict(zip(self.names, zip(self.offsets, self.ends)))
        row.zero_()
        for n, u in self._solo[self.slot_layouts[r]].items():
            row[cols[u][0]:cols[u][1]].copy_(saved[n])


def replicate_mixed(models: list[nn.Module], layouts: Sequence[Layout] | None = None) -> MixedReplicatedLM:
    """One :class:`MixedReplicatedLM` of ``models`` (one depth and config, any layouts and seeds) that can also take,
    in a freed slot, a model of any of ``layouts``."""
    return MixedReplicatedLM(list(models), layouts)
