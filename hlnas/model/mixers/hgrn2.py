"""HGRN-2 (Qin et al. 2024, "Gated Linear RNNs with State Expansion"), shaped as fla's ``HGRN2Attention``.

q and forget-gate projections to ``num_heads * expand_ratio`` channels, input projection i to d_model;
``f = lb + (1 - lb) * sigmoid(f_proj(x))`` with a per-layer lower bound ``lb``; the GLA recurrence with
q = swish(q), k = 1 - f, v = i, g = log f (``hlnas.model.kernels.gla``, default scale ``expand_ratio ** -0.5``
as fla); an ungated RMSNorm over the whole width; o_proj. Short convolutions (no activation, as fla) are
off by default.

Width: fla uses ``expand_ratio = 128``, ``num_heads = d_model // 128``. ``defaults`` caps the ratio at
d_model so small proxies still build (d_model=64: one head with a 64 x 64 state).

Lower bound: fla's HGRN2 *model* owns ``lower_bounds [n_layers, d]`` (zeros), turns them into
``cumsum(softmax(., dim=layers)) - softmax[0]``: 0 for layer 0, ``i / n_layers`` for layer i at init,
rising with depth. A mixer here sees only its own layer, so each layer keeps its own learnable logits
``lower_bound [forget_dim]`` with ``lb = sigmoid(lower_bound + logit(i / n_layers))``: equal to fla's value
at init, pulled back towards it by weight decay, and exactly 0 (no gradient) for layer 0 as in fla. What
is lost is fla's coupling of the layers through one softmax (which keeps the bounds monotone in depth).

Decode cache: ``"state"`` ``[B, H, expand_ratio, d_model / H]`` (float32; float64 for float64 inputs),
and with short convs ``"conv_q"``, ``"conv_f"``, ``"conv_i"`` in the activation dtype.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hlnas.errors import ConfigError
from hlnas.model.kernels.gla import gla
from hlnas.model.mixers.base import STATE_DTYPE, Mixer
from hlnas.model.mixers.short_conv import ShortConvolution
from hlnas.model.nn import RMSNorm, fused_linear


class HGRN2(Mixer):
    name = "hgrn2"
    bare_parameters = ("lower_bound",)

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Hparams:
        expand_ratio: int = 128  # key (forget) dim per head: the state is expand_ratio x (d_model / heads)
        num_heads: int | None = None  # None = d_model // expand_ratio, as fla
        use_short_conv: bool = False
        conv_size: int = 4
        conv_bias: bool = False
        use_lower_bound: bool = True
        n_layers: int = 24  # depth the lower bounds are spread over (layer i starts at i / n_layers)
        norm_eps: float = 1e-6

    @classmethod
    def defaults(cls, cfg) -> dict:
        return dict(expand_ratio=min(128, cfg.d_model), n_layers=cfg.n_layers, norm_eps=cfg.norm_eps)

    @staticmethod
    def _dims(d_model: int, hp: Hparams) -> tuple[int, int, int]:
        """(heads, forget_dim, head_i_dim)."""
        heads = hp.num_heads if hp.num_heads is not None else d_model // hp.expand_ratio
        return heads, heads * hp.expand_ratio, d_model // max(heads, 1)

    @classmethod
    def validate(cls, d_model: int, hp: Hparams) -> None:
        if hp.expand_ratio < 1:
            raise ConfigError(f"hgrn2: expand_ratio={hp.expand_ratio} must be >= 1")
        heads, _, _ = cls._dims(d_model, hp)
        if heads < 1 or d_model % heads:
            raise ConfigError(
                f"hgrn2: {heads} heads (num_heads={hp.num_heads}, d_model={d_model} // expand_ratio="
                f"{hp.expand_ratio}) must be >= 1 and divide d_model; lower expand_ratio or set num_heads"
            )
        if hp.n_layers < 1:
            raise ConfigError(f"hgrn2: n_layers={hp.n_layers} must be >= 1")
        if hp.use_short_conv and hp.conv_size < 2:
            raise ConfigError(f"hgrn2: conv_size={hp.conv_size} must be >= 2 with use_short_conv")

    @classmethod
    def _conv_channels(cls, d_model: int, hp: Hparams) -> tuple[int, ...]:
        _, fdim, _ = cls._dims(d_model, hp)
        return (fdim, fdim, d_model) if hp.use_short_conv else ()

    @classmethod
    def param_count(cls, d_model: int, hp: Hparams) -> int:
        _, fdim, _ = cls._dims(d_model, hp)
        n = 2 * d_model * fdim + 2 * d_model * d_model + d_model  # q, f; i, o; norm weight
        n += sum(c * (hp.conv_size + hp.conv_bias) for c in cls._conv_channels(d_model, hp))
        return n + (fdim if hp.use_lower_bound else 0)

    @classmethod
    def state_bytes(cls, d_model: int, hp: Hparams, *, batch: int, seq_len: int, dtype: torch.dtype) -> int:
        heads, _, head_i = cls._dims(d_model, hp)
        itemsize = torch.empty((), dtype=dtype).element_size()
        state = batch * heads * hp.expand_ratio * head_i * STATE_DTYPE.itemsize
        return state + sum(ShortConvolution.state_bytes(c, hp.conv_size, batch, itemsize)
                           for c in cls._conv_channels(d_model, hp))

    @classmethod
    def flops_per_token(cls, d_model: int, hp: Hparams, seq_len: int) -> int:
        heads, fdim, head_i = cls._dims(d_model, hp)
        proj = 2 * d_model * fdim + 2 * d_model * d_model  # q, f; i, o
        proj += sum(c * hp.conv_size for c in cls._conv_channels(d_model, hp))
        # the paper's Table 4 gives 7 d^2 / H for HGRN-2, i.e. 7 H * expand_ratio * head_i here
        return 2 * proj + 7 * heads * hp.expand_ratio * head_i

    def __init__(self, d_model: int, hp: Hparams, layer_idx: int):
        super().__init__(d_model, hp, layer_idx)
        self.heads, fdim, self.head_i = self._dims(d_model, hp)
        self.q_proj = nn.Linear(d_model, fdim, bias=False)
        self.f_proj = nn.Linear(d_model, fdim, bias=False)
        self.i_proj = nn.Linear(d_model, d_model, bias=False)
        if hp.use_short_conv:
            conv = lambda c: ShortConvolution(c, hp.conv_size, activation=None, bias=hp.conv_bias)  # noqa: E731
            self.q_conv, self.f_conv, self.i_conv = (conv(c) for c in self._conv_channels(d_model, hp))
        if hp.use_lower_bound:
            self.lower_bound = nn.Parameter(torch.zeros(fdim))
            # a layer past n_layers (a layout deeper than the config says) gets the top layer's bound
            frac = min(layer_idx, hp.n_layers - 1) / hp.n_layers
            # a (non-saved) buffer, not a Python float: torch.compile guarded on the float and recompiled the block at
            # the second layer; as a tensor every layer shares one graph (hlnas.model.mixers.hgrn: the same)
            offset = math.log(frac / (1 - frac)) if frac > 0 else -math.inf
            self.register_buffer("_lb_offset", torch.tensor(offset, dtype=torch.float64), persistent=False)
        self.g_norm = RMSNorm(d_model, hp.norm_eps)
        self.o_proj = nn.Linear(d_model, d_model, bias=False)

    def reset_special_parameters(self) -> None:
        if self.hp.use_lower_bound:  # zeros = fla's init of its lower_bounds
            nn.init.zeros_(self.lower_bound)

    def forward(self, x: Tensor, cache: dict | None = None) -> Tensor:
        """x ``[B, T, d_model]`` -> ``[B, T, d_model]``; ``cache`` is read and updated in place."""
        B, T, _ = x.shape
        hp = self.hp
        q, f, i = fused_linear(x, self.q_proj, self.f_proj, self.i_proj)
        if hp.use_short_conv:
            q = self.q_conv(q, cache, key="conv_q")
            f = self.f_conv(f, cache, key="conv_f")
            i = self.i_conv(i, cache, key="conv_i")
        q = F.silu(q)
        # log forget gate, kept in float32 (float64 in tests); fla's chunk_gla accepts a float32 g
        g = F.logsigmoid(f.to(torch.promote_types(f.dtype, torch.float32)))
        if hp.use_lower_bound:  # log(lb + (1 - lb) * f) in log space; layer 0: logit -inf -> g unchanged
            z = self.lower_bound.to(g.dtype) + self._lb_offset.to(g.dtype)
            g = torch.logaddexp(F.logsigmoid(z), F.logsigmoid(-z) + g)
        k = -torch.expm1(g)  # 1 - f without cancellation when f is near 1
        H, E = self.heads, hp.expand_ratio
        state = cache.get("state") if cache is not None else None
        o, state = gla(q.view(B, T, H, E), k.to(q.dtype).view(B, T, H, E), i.view(B, T, H, self.head_i),
                       g.view(B, T, H, E), initial_state=state, output_final_state=cache is not None)
        if cache is not None:
            cache["state"] = state.detach()
        return self.o_proj(self.g_norm(o.reshape(B, T, -1)))
