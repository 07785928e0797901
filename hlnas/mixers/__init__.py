"""Token mixers: one file per mixer, each a :class:`~hlnas.mixers.base.Mixer` subclass, and the short convolution they
share (:mod:`hlnas.mixers.short_conv`).

The name -> class registry is :data:`hlnas.catalog.MIXERS` (lazy, no torch at import).
"""

from hlnas.catalog import MIXERS
from hlnas.mixers.base import STATE_DTYPE, Mixer

__all__ = ["MIXERS", "Mixer", "STATE_DTYPE", "get_mixer"]


def get_mixer(name: str) -> type[Mixer]:
    return MIXERS.get(name)
