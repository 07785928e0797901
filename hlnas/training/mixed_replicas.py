"""Replicas of *different* layouts of one depth as one model (issue #21; #20 point 7, a recall GPU-second's cost).

:mod:`hlnas.training.replicas` stacks R models of one layout. The grid's and the calibration's layouts come in
families that differ only in which layers are attention: GLA pure, 24:1, ..., 3:1 are the same model but for the
mixer at a few layers. :class:`MixedReplicatedLM` puts runs of such layouts into one replicated model, so one step
trains a whole family's runs.

How: at each layer ``i`` the model holds every mixer kind that one of the layouts it takes (``layouts``) has there,
in a :class:`RoutedMixer`. Two routings:

* **ranges** (``static``: each slot keeps its layout, as when every run has a slot of its own): the replicas are
  ordered so that at each layer each kind's replicas are one contiguous range (:func:`range_order`; nested attention
  sets such as the paper placement's ratios always are), and each kind's parameters are those replicas' rows of
  the storage: a kind computes its own rows only, and the outputs are concatenated. The model does the work of its
  solo models, in fewer, larger kernels.
* **where** (any slot may take a run of any layout, or no order groups the kinds): each kind on every row, and in
  each replica's rows the output of its own kind (``torch.where`` on a per-replica route, a buffer: static shapes,
  so the step is captured once and a slot can change layout between steps). A layer where the layouts differ then
  runs each of its kinds on all rows: GLA's five grid layouts (24 layers, attention at the 3:1 positions in all)
  do 24 GLA and 8 attention layers a row against 21 and 3 on average alone.

Either way each replica's rows go through exactly the ops of its solo model, and a kind that is not its own gets
no gradient in its rows: its weights in that replica take no part (AdamW's decay shrinks them, harmlessly). The other
kinds' weights in a replica are copies of one template mixer per layer and kind (drawn from seed 0, outside the
global random state). ``experiments/bench/proxy_throughput.py --modes replicas_mixed,replicas_mixed_where`` measures
both against the same runs as processes: on an H100 at the grid protocol's shape, 5 GLA-family runs ran 0.85x and
0.76x as 5 processes, and compiled, the mixed model (a block's code compiled once per kind and replica count) did not
finish compiling in 220 s (``proxy_throughput_h100_2026-12-06c.md``), so ``--mixed-replicas`` is off by default.

Parameter names: replica ``r``'s weights are reported and loaded under its solo model's names
(:meth:`MixedReplicatedLM.replica_state`, :meth:`~MixedReplicatedLM.load_replica`, :meth:`~MixedReplicatedLM.to_solo`);
``blocks.{i}.mixer.{name}`` of a solo model is ``blocks.{i}.mixer.mixers.{kind}.{name}`` of the union.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from hlnas.model.layout import Layout
from hlnas.training.replicas import ReplicaError, ReplicatedLM

__all__ = ["MixedReplicatedLM", "RoutedMixer", "kind_ranges", "range_order", "replicate_mixed"]


class RoutedMixer(nn.Module):
    """One layer's mixer kinds (``mixers``, a kind name each); replica ``r``'s rows take the output of kind
    ``route[r]``. ``fold`` (the replicated model's) gives the per-replica batch of the current forward.

    Two ways (:attr:`ranges`): None, each kind on every row and each row's own kept (``torch.where``: any slot may
    change layout); or each kind's replicas a contiguous range ``[a, b)`` whose rows alone it computes, the outputs
    concatenated (no work on rows that discard it; the slots keep their layouts)."""

    def __init__(self, mixers: dict[str, nn.Module], replicas: int):
        super().__init__()
        self.kinds = sorted(mixers)
        self.mixers = nn.ModuleDict({k: mixers[k] for k in self.kinds})
        # on the mixers' device: built from models already on the GPU, a CPU route broke the CUDA graph's capture
        device = next(p.device for m in self.mixers.values() for p in m.parameters())
        self.register_buffer("route", torch.zeros(replicas, dtype=torch.long, device=device), persistent=False)
        self.fold = None  # the replicated model's (its replicas and the per-replica batch), set when it is built
        self.ranges: list[tuple[str, int, int]] | None = None  # (kind, first replica, end) in replica order

    def forward(self, x: Tensor, cache: dict | None = None) -> Tensor:
        if cache is not None:
            raise ReplicaError("a replicated model trains only: it has no decode cache")
        if len(self.kinds) == 1:
            return self.mixers[self.kinds[0]](x, None)
        B = self.fold.batch
        if self.ranges is not None:
            return torch.cat([self.mixers[k](x[a * B : b * B], None) for k, a, b in self.ranges])
        rows = self.route.repeat_interleave(B)[:, None, None]  # [R*B, 1, 1]: each row's kind
        out = None
        for j, k in enumerate(self.kinds):
            y = self.mixers[k](x, None)
            # where, not a 0/1 product: another kind's output in these rows never reaches them, not even as 0 * inf
            out = y if out is None else torch.where(rows == j, y, out)
        return out


def kind_ranges(layouts: Sequence[Layout]) -> list[list[tuple[str, int, int]]] | None:
    """Per layer, each kind's replicas as one contiguous range ``(kind, a, b)`` of ``layouts`` (in that order), or
    None where some layer's kind recurs after another (the order does not group them)."""
    out = []
    for i in range(layouts[0].n_layers):
        col, ranges = [lay.mixers[i] for lay in layouts], []
        for r, k in enumerate(col):
            if ranges and ranges[-1][0] == k:
                ranges[-1][2] = r + 1
            elif any(k == q for q, _, _ in ranges):
                return None
            else:
                ranges.append([k, r, r + 1])
        out.append([tuple(x) for x in ranges])
    return out


def range_order(layouts: Sequence[Layout]) -> list[int]:
    """An order of ``layouts`` (indices) that groups each layer's kinds where one simple order does: most attention
    layers first, then by layout (nested attention sets, the paper placement's ratios, give prefixes of attention)."""
    return sorted(range(len(layouts)), key=lambda r: (-len(layouts[r].attention_layers), str(layouts[r])))


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
    from hlnas.model.build import HybridLM

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

    def __init__(self, models: list[nn.Module], layouts: Sequence[Layout] | None = None, static: bool = False):
        if not models:
            raise ReplicaError("replicate_mixed needs at least one model")
        takes = list(dict.fromkeys([*(m.layout for m in models), *(() if static else layouts or ())]))
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
        self.static = False  # set below, once the slots are routed
        for r, m in enumerate(models):
            self._route(r, m.layout)
            self._names_of(m)
        # slots that keep their layouts, each layer's kinds in contiguous replica ranges: each kind computes its rows only
        ranges = kind_ranges(self.slot_layouts) if static else None
        self.static = ranges is not None
        if ranges is not None:
            for router, layer in zip(self.routers, ranges):
                if len(router.kinds) > 1:
                    self._narrow(router, layer)

    def _narrow(self, router: RoutedMixer, layer: list[tuple[str, int, int]]) -> None:
        """Each kind's replicated parameters at ``router`` as the rows ``[a, b)`` of its replicas only (views of the same
        storage, and their gradients of the gradient storage): what its range of rows computes with."""
        router.ranges = layer
        for k, a, b in layer:
            mixer = router.mixers[k]
            for name, p in list(mixer.named_parameters()):
                owner_name, _, attr = name.rpartition(".")
                owner = mixer.get_submodule(owner_name) if owner_name else mixer
                q = nn.Parameter(p.data[a:b])
                q.grad = p.grad[a:b]
                setattr(owner, attr, q)

    @torch.no_grad()
    def _route(self, r: int, layout: Layout) -> None:
        if self.static and layout != self.slot_layouts[r]:
            raise ReplicaError(f"slot {r} keeps layout {self.slot_layouts[r]} (a model whose kinds compute their own rows "
                               f"only): it cannot take {layout}")
        if layout not in self.takes:
            raise ReplicaError(f"this mixed replicated model takes layouts {', '.join(map(str, self.takes))}; "
                               f"got {layout} (give it among replicate_mixed's layouts)")
        for i, m in enumerate(self.routers):
            m.route[r] = m.kinds.index(layout.mixers[i])
        self.slot_layouts[r] = layout

    def _names_of(self, model: nn.Module) -> dict[str, str]:
        """``model``'s parameter names (a solo model of one of :attr:`takes`) -> the union's, kept per layout for
        :meth:`_solo_names`."""
        mapped = {n: _union_name(n, model.layout) for n, _ in model.named_parameters()}
        missing = [u for u in mapped.values() if u not in self.stacked]
        if missing:
            raise ReplicaError(f"model of layout {model.layout} has parameters {missing[:3]} this mixed model does not hold")
        self._solo[model.layout] = mapped
        return mapped

    def _solo_names(self, r: int) -> dict[str, str]:
        """The parameter names of the solo model slot ``r`` trains now -> the union's."""
        return self._solo[self.slot_layouts[r]]

    def load_replica(self, r: int, model: nn.Module) -> None:
        """Replica ``r`` becomes ``model`` (a solo model of one of :attr:`takes`): its weights, and its route."""
        self._route(r, model.layout)
        super().load_replica(r, model)

    def to_solo(self, r: int, model: nn.Module) -> nn.Module:
        """Copy replica ``r``'s weights into ``model`` (a solo model of the layout slot ``r`` trains) and return it."""
        if model.layout != self.slot_layouts[r]:
            raise ReplicaError(f"to_solo: slot {r} trains {self.slot_layouts[r]}, not {model.layout}")
        return super().to_solo(r, model)


def replicate_mixed(models: list[nn.Module], layouts: Sequence[Layout] | None = None,
                    static: bool = False) -> MixedReplicatedLM:
    """One :class:`MixedReplicatedLM` of ``models`` (one depth and config, any layouts and seeds) that can also take,
    in a freed slot, a model of any of ``layouts``. ``static``: each slot keeps its model's layout (a freed slot takes
    only a run of the same layout), so where ``models`` come in an order that groups each layer's kinds
    (:func:`range_order`), each kind computes only its replicas' rows."""
    return MixedReplicatedLM(list(models), layouts, static)
