"""The short causal depthwise convolution of the mixers (fla's ``ShortConvolution``): q/k/v convs of the delta rules
and GLA, HGRN's gate convs, Mamba-2's conv1d and attention's input conv. Its sequence op, with the PyTorch and fla
paths, is :mod:`hlnas.model.kernels.causal_conv1d`."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from hlnas.model.kernels.causal_conv1d import causal_conv1d

__all__ = ["ShortConvolution"]


class ShortConvolution(nn.Module):
    """Causal depthwise conv1d over time (kernel ``size``), optional SiLU, as in fla's ShortConvolution.

    Decode state: the last ``size - 1`` inputs, ``[B, size-1, C]`` in the input dtype.
    """

    def __init__(self, channels: int, size: int = 4, activation: str | None = "silu", bias: bool = False):
        super().__init__()
        self.channels, self.size, self.activation = channels, size, activation
        self.weight = nn.Parameter(torch.empty(channels, 1, size))
        self.bias = nn.Parameter(torch.zeros(channels)) if bias else None
        nn.init.kaiming_uniform_(self.weight, a=5**0.5)

    @staticmethod
    def state_bytes(channels: int, size: int, batch: int, itemsize: int) -> int:
        return batch * (size - 1) * channels * itemsize

    def forward(self, x: Tensor, cache: dict | None = None, key: str = "conv") -> Tensor:
        """x: [B, T, C] -> [B, T, C]. With ``cache``, prepends and updates ``cache[key]`` (the op's paths, fla's kernel
        on CUDA without a cache: :mod:`hlnas.model.kernels.causal_conv1d`)."""
        past = cache.get(key) if cache is not None else None
        y, state = causal_conv1d(x, self.weight, self.bias, activation=self.activation, initial_state=past,
                                 output_final_state=cache is not None)
        if cache is not None:
            cache[key] = state
        return y
