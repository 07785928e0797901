"""Mamba-2 (Dao & Gu 2024, arXiv 2405.21060), shaped like fla's ``Mamba2`` layer.

    z, xBC, dt = in_proj(x)                      # [B,T,I], [B,T,I + 2 G N], [B,T,H]; I = expand * d_model
    x, B, C = silu(conv1d(xBC))                  # causal depthwise conv, kernel 4, with bias
    dt = softplus(dt + dt_bias),  A = -exp(A_log)                                    # [B,T,H], [H]
    S_t = exp(A dt_t) S_{t-1} + B_t^T (x_t dt_t),  y_t = C_t S_t + D x_t             # per head
    out = out_proj(RMSNorm_grouped(y * silu(z)))  # fla's RMSNormGated, norm_before_gate=False

The SSD scan is :func:`hlnas.model.kernels.simple_gla.simple_gla` with q = C, k = B, v = x * dt,
g = A * dt and scale 1; its state ``[B, H, N, P]`` (N = state_size, P = head_dim) is the
transpose of mamba_ssm's ``[B, H, P, N]``. Head h reads B/C group ``h // (H / G)`` as mamba_ssm does.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hlnas.errors import ConfigError
from hlnas.model.kernels.simple_gla import simple_gla
from hlnas.model.mixers.base import STATE_DTYPE, Mixer
from hlnas.model.mixers.short_conv import ShortConvolution
from hlnas.model.nn import compute_dtype, lean_gated_norm, takes_lean_norm


class _GroupedGatedRMSNorm(nn.Module):
    """RMSNorm(y * silu(z)) over ``groups`` equal slices of the last dim (mamba_ssm's norm_before_gate=False)."""

    def __init__(self, dim: int, groups: int, eps: float):
        super().__init__()
        self.groups, self.eps = groups, eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, y: Tensor, z: Tensor) -> Tensor:
        if takes_lean_norm(y):
            return lean_gated_norm(y, z, self.weight, self.eps, "swish", gate_first=True, groups=self.groups)
        cdt = compute_dtype(y)
        h = y.to(cdt) * F.silu(z.to(cdt))
        h = h.unflatten(-1, (self.groups, -1))
        h = (h * torch.rsqrt(h.square().mean(-1, keepdim=True) + self.eps)).flatten(-2)
        return (h * self.weight.to(cdt)).to(y.dtype)


class Mamba2(Mixer):
    name = "mamba2"
    bare_parameters = ("A_log", "dt_bias", "D")

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Hparams:
        head_dim: int = 64
        expand: int = 2
        state_size: int = 128
        n_groups: int = 1
        conv_kernel: int = 4
        use_conv_bias: bool = True
        use_bias: bool = False  # in_proj / out_proj bias
        A_init_range: tuple[float, float] = (1.0, 16.0)
        dt_min: float = 0.001
        dt_max: float = 0.1
        dt_init_floor: float = 1e-4
        norm_eps: float = 1e-5

    @classmethod
    def defaults(cls, cfg) -> dict:
        # fla's head_dim 64 and state 128, shrunk at small widths so that there are >= 4 heads and
        # the state is no wider than d_model (d_model 64 -> 4 heads of 32, N = 64)
        inner = 2 * cfg.d_model
        return dict(head_dim=min(64, max(1, inner // 4)), state_size=min(128, cfg.d_model), norm_eps=cfg.norm_eps)

    @staticmethod
    def _dims(d_model: int, hp: Hparams) -> tuple[int, int, int]:
        """(inner width I, heads H, conv channels I + 2 G N)."""
        inner = hp.expand * d_model
        return inner, inner // hp.head_dim, inner + 2 * hp.n_groups * hp.state_size

    @classmethod
    def validate(cls, d_model: int, hp: Hparams) -> None:
        inner, H, _ = cls._dims(d_model, hp)
        if hp.head_dim < 1 or inner % hp.head_dim:
            raise ConfigError(f"mamba2: expand * d_model = {inner} must divide by head_dim={hp.head_dim}")
        if hp.n_groups < 1 or H % hp.n_groups:
            raise ConfigError(f"mamba2: num_heads={H} (= {inner} / head_dim) must divide by n_groups={hp.n_groups}")
        if hp.conv_kernel < 2 or hp.state_size < 1:
            raise ConfigError(f"mamba2: conv_kernel={hp.conv_kernel} must be >= 2 and state_size={hp.state_size} >= 1")
        lo, hi = hp.A_init_range
        if not 0 < lo <= hi or not 0 < hp.dt_min <= hp.dt_max:
            raise ConfigError(
                f"mamba2: need 0 < A_init_range[0] <= A_init_range[1] (got {hp.A_init_range}) "
                f"and 0 < dt_min <= dt_max (got {hp.dt_min}, {hp.dt_max})"
            )

    @classmethod
    def param_count(cls, d_model: int, hp: Hparams) -> int:
        inner, H, conv = cls._dims(d_model, hp)
        proj = inner + conv + H  # z, xBC, dt
        n = d_model * proj + inner * d_model + (proj + d_model if hp.use_bias else 0)
        n += conv * hp.conv_kernel + (conv if hp.use_conv_bias else 0)
        return n + 3 * H + inner  # A_log, dt_bias, D; norm weight

    @classmethod
    def state_bytes(cls, d_model: int, hp: Hparams, *, batch: int, seq_len: int, dtype: torch.dtype) -> int:
        inner, H, conv = cls._dims(d_model, hp)
        ssm = batch * H * hp.state_size * hp.head_dim * torch.empty((), dtype=STATE_DTYPE).element_size()
        itemsize = torch.empty((), dtype=dtype).element_size()
        return ssm + ShortConvolution.state_bytes(conv, hp.conv_kernel, batch, itemsize)

    @classmethod
    def flops_per_token(cls, d_model: int, hp: Hparams, seq_len: int) -> int:
        inner, H, conv = cls._dims(d_model, hp)
        proj = 2 * (d_model * (inner + conv + H) + inner * d_model)
        # the paper's Table 4: Mamba-2 5 d^2 / H, d^2 / H being the state size per layer (d/H)^2 x H;
        # here the state is H x N x P = N * inner
        return proj + 5 * hp.state_size * inner

    def __init__(self, d_model: int, hp: Hparams, layer_idx: int):
        super().__init__(d_model, hp, layer_idx)
        inner, H, conv = self._dims(d_model, hp)
        self.inner, self.num_heads, self.conv_dim = inner, H, conv
        self.in_proj = nn.Linear(d_model, inner + conv + H, bias=hp.use_bias)
        self.conv1d = ShortConvolution(conv, hp.conv_kernel, activation="silu", bias=hp.use_conv_bias)
        self.A_log = nn.Parameter(torch.empty(H))
        self.dt_bias = nn.Parameter(torch.empty(H))
        self.D = nn.Parameter(torch.empty(H))
        for p in (self.A_log, self.dt_bias, self.D):
            p._no_weight_decay = True  # as in fla / mamba_ssm
        self.norm = _GroupedGatedRMSNorm(inner, hp.n_groups, hp.norm_eps)
        self.out_proj = nn.Linear(inner, d_model, bias=hp.use_bias)
        self.reset_special_parameters()

    def reset_special_parameters(self) -> None:
        """Mamba-2's init: A ~ U(A_init_range); dt ~ logU(dt_min, dt_max) stored through softplus^-1; D = 1."""
        hp, H = self.hp, self.num_heads
        with torch.no_grad():
            A = torch.empty(H, dtype=torch.float32).uniform_(*hp.A_init_range)
            self.A_log.copy_(A.log())
            dt = torch.exp(torch.rand(H) * (math.log(hp.dt_max) - math.log(hp.dt_min)) + math.log(hp.dt_min))
            dt = dt.clamp(min=hp.dt_init_floor)
            self.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # softplus(dt_bias) = dt
            self.D.fill_(1.0)

    def residual_out(self) -> nn.Linear:
        return self.out_proj

    def forward(self, x: Tensor, cache: dict | None = None) -> Tensor:
        """x ``[B, T, d_model]`` -> ``[B, T, d_model]``; cache: "state" ``[B, H, N, P]`` float32, "conv"."""
        B, T, _ = x.shape
        H, G, N, P = self.num_heads, self.hp.n_groups, self.hp.state_size, self.hp.head_dim
        cdt = compute_dtype(x)
        z, xbc, dt = self.in_proj(x).split([self.inner, self.conv_dim, H], dim=-1)
        xbc = self.conv1d(xbc, cache, key="conv")
        xs, Bm, Cm = xbc.split([self.inner, G * N, G * N], dim=-1)
        xs = xs.view(B, T, H, P)
        dt = F.softplus(dt.to(cdt) + self.dt_bias.to(cdt))  # [B, T, H]
        g = -torch.exp(self.A_log.to(cdt)) * dt  # log-decay A * dt <= 0
        k = Bm.view(B, T, G, N).repeat_interleave(H // G, dim=2)
        q = Cm.view(B, T, G, N).repeat_interleave(H // G, dim=2)
        xs = xs.to(cdt)  # once: each of the two products below saved its own float32 copy for backward (6 GiB of
        # Mamba-2's 24 layers at paper-340m, B=8, T=4096)
        v = xs * dt[..., None]
        h0 = None if cache is None else cache.get("state")
        y, ht = simple_gla(q, k, v, g, scale=1.0, initial_state=h0, output_final_state=cache is not None)
        if cache is not None:
            cache["state"] = ht.detach()
        # D skip connection
        y = y.to(cdt) + xs * self.D.to(cdt)[..., None]
        return self.out_proj(self.norm(y.reshape(B, T, self.inner).to(x.dtype), z))
