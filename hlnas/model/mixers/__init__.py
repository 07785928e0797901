"""Token mixers: one file per mixer, each a :class:`~hlnas.model.mixers.base.Mixer` subclass, and the short convolution they
share (:mod:`hlnas.model.mixers.short_conv`).

The name -> class registry is :data:`hlnas.model.catalog.MIXERS` (lazy, no torch at import).
"""

from hlnas.model.catalog import MIXERS
from hlnas.model.mixers.base import STATE_DTYPE, Mixer

__all__ = ["MIXERS", "Mixer", "STATE_DTYPE", "get_mixer"]


def get_mixer(name: str) -> type[Mixer]:
    return MIXERS.get(name)
