"""HGRN (Qin et al. 2023, arXiv 2311.04823), shaped like fla's ``HGRNAttention`` layer.

    i, f, g = i_proj(x), f_proj(x), g_proj(x)            # each [B, T, D], D = expand_ratio * d_model
    f = log(lb + (1 - lb) * sigmoid(f))                  # log forget gate, floored at lb (see below)
    h_t = exp(f_t) * h_{t-1} + silu(i_t) * (1 - exp(f_t))
    y = o_proj(RMSNorm(h) * silu(g))

Forget-gate lower bound. fla's ``HGRNModel`` owns one ``[n_layers, D]`` parameter and gives layer i
the bound ``cumsum(softmax(P, dim=0))[i] - softmax(P)[0]``: zero in layer 0, rising with depth, at
init exactly ``i / n_layers`` in every channel. A mixer here sees only its own layer, so each HGRN
layer owns its bound: ``lb = 1 - exp(-(w0 + w)^2)`` per channel, with ``w`` learnable and zero at
init, and the constant ``w0`` chosen so that ``lb = min(i, n_layers - 1) / n_layers`` at init
(fla's initial value). Weight decay pulls w to 0, i.e. lb back to that value, as it pulls fla's
logits to the uniform softmax. In layer 0, w0 = 0: lb = 0 with zero gradient, so layer 0 stays
unbounded as in fla. What is lost is fla's coupling of the bounds across layers (monotone in depth
by construction); here each layer learns its own. ``use_lower_bound=False`` drops the bound.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hlnas.errors import ConfigError
from hlnas.model.kernels.hgrn import hgrn
from hlnas.model.mixers.base import STATE_DTYPE, Mixer
from hlnas.model.mixers.short_conv import ShortConvolution
from hlnas.model.nn import compute_dtype, GatedRMSNorm, fused_linear


class HGRN(Mixer):
    name = "hgrn"
    bare_parameters = ("lower_bound_w",)

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Hparams:
        expand_ratio: int = 1
        use_lower_bound: bool = True
        num_layers: int = 24  # depth the lower bounds are spread over (fla: num_hidden_layers)
        use_short_conv: bool = False  # fla's optional convs on i and f (no activation)
        conv_size: int = 4
        norm_eps: float = 1e-6

    @classmethod
    def defaults(cls, cfg) -> dict:
        return dict(num_layers=cfg.n_layers, norm_eps=cfg.norm_eps)

    @classmethod
    def validate(cls, d_model: int, hp: Hparams) -> None:
        if hp.expand_ratio < 1 or hp.num_layers < 1:
            raise ConfigError(f"hgrn: expand_ratio={hp.expand_ratio} and num_layers={hp.num_layers} must be >= 1")
        if hp.use_short_conv and hp.conv_size < 2:
            raise ConfigError(f"hgrn: conv_size={hp.conv_size} must be >= 2 with use_short_conv")

    @classmethod
    def param_count(cls, d_model: int, hp: Hparams) -> int:
        D = hp.expand_ratio * d_model
        n = 4 * d_model * D + D  # i, f, g, o projections; norm weight
        n += D if hp.use_lower_bound else 0
        n += 2 * D * hp.conv_size if hp.use_short_conv else 0
        return n

    @classmethod
    def state_bytes(cls, d_model: int, hp: Hparams, *, batch: int, seq_len: int, dtype: torch.dtype) -> int:
        D = hp.expand_ratio * d_model
        held = batch * D * torch.empty((), dtype=STATE_DTYPE).element_size()
        if hp.use_short_conv:
            itemsize = torch.empty((), dtype=dtype).element_size()
            held += 2 * ShortConvolution.state_bytes(D, hp.conv_size, batch, itemsize)
        return held

    @classmethod
    def flops_per_token(cls, d_model: int, hp: Hparams, seq_len: int) -> int:
        D = hp.expand_ratio * d_model
        return 2 * 4 * d_model * D + 5 * D  # projections; the paper's Table 4: HGRN 5d

    def __init__(self, d_model: int, hp: Hparams, layer_idx: int):
        super().__init__(d_model, hp, layer_idx)
        D = self.inner = hp.expand_ratio * d_model
        self.i_proj = nn.Linear(d_model, D, bias=False)
        self.f_proj = nn.Linear(d_model, D, bias=False)
        self.g_proj = nn.Linear(d_model, D, bias=False)
        if hp.use_short_conv:
            self.i_conv = ShortConvolution(D, hp.conv_size, activation=None)
            self.f_conv = ShortConvolution(D, hp.conv_size, activation=None)
        L = hp.num_layers
        # 1 - exp(-w0^2) = i / L. A tensor, not a Python float: torch.compile guarded on the float and recompiled the
        # block at the second layer (TORCH_LOGS=recompiles); as a (non-saved) buffer every layer shares one graph.
        # float64, as the float it replaces; read in the computation's dtype
        w0 = math.sqrt(-math.log1p(-min(layer_idx, L - 1) / L))
        self.register_buffer("lower_bound_w0", torch.tensor(w0, dtype=torch.float64), persistent=False)
        self.lower_bound_w = nn.Parameter(torch.zeros(D)) if hp.use_lower_bound else None
        self.g_norm = GatedRMSNorm(D, hp.norm_eps, act="swish")
        self.o_proj = nn.Linear(D, d_model, bias=False)
        self.reset_special_parameters()

    def reset_special_parameters(self) -> None:
        if self.lower_bound_w is not None:
            nn.init.zeros_(self.lower_bound_w)  # lb back to fla's initial i / n_layers

    def lower_bound(self) -> Tensor | None:
        """This layer's forget-gate floor ``[D]`` in [0, 1), or None."""
        if self.lower_bound_w is None:
            return None
        w = self.lower_bound_w
        w = w.to(compute_dtype(w))  # a bf16 w0 would move lb by ~1%
        return -torch.expm1(-(w + self.lower_bound_w0.to(w.dtype)).square())

    def forward(self, x: Tensor, cache: dict | None = None) -> Tensor:
        """x ``[B, T, d_model]`` -> ``[B, T, d_model]``; cache: "state" ``[B, D]`` float32 (+ conv windows)."""
        cdt = compute_dtype(x)
        i, f, g = fused_linear(x, self.i_proj, self.f_proj, self.g_proj)
        if self.hp.use_short_conv:
            i, f = self.i_conv(i, cache, key="conv_i"), self.f_conv(f, cache, key="conv_f")
        f = F.logsigmoid(f.to(cdt))
        lb = self.lower_bound()
        if lb is not None:
            # log(lb + (1 - lb) sigmoid(f)); the clamp keeps log(0) (layer 0) finite for autograd
            lb = lb.to(cdt)
            f = torch.logaddexp(lb.clamp_min(1e-30).log(), torch.log1p(-lb) + f)
        i = (F.silu(i.to(cdt)) * -torch.expm1(f)).to(x.dtype)  # input gated by 1 - forget
        h0 = None if cache is None else cache.get("state")
        o, ht = hgrn(i, f, initial_state=h0, output_final_state=cache is not None)
        if cache is not None:
            cache["state"] = ht.detach()
        return self.o_proj(self.g_norm(o, g))
