"""hlnas: neural architecture search over hybrid linear-attention language models.

Data flows one way: space -> layout -> (cost) -> model (mixers -> kernels) -> recall and LM training -> score
-> study -> dashboard. Names here are imported lazily so ``import hlnas`` does not pull in torch.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_LAZY = {
    "Layout": "hlnas.model.layout",
    "build_layout": "hlnas.model.layout",
    "PAPER_RATIOS": "hlnas.model.layout",
    "PLACEMENTS": "hlnas.model.layout",
    "ModelConfig": "hlnas.model.config",
    "PRESETS": "hlnas.model.config",
    "preset": "hlnas.model.config",
    "LayoutCost": "hlnas.model.cost",
    "layout_cost": "hlnas.model.cost",
    "HybridLM": "hlnas.model.build",
    "Cache": "hlnas.model.build",
    "build_model": "hlnas.model.build",
    "MIXERS": "hlnas.model.catalog",
    "PAPER_MIXERS": "hlnas.model.catalog",
    "HlnasError": "hlnas.errors",
    "SearchSpace": "hlnas.space",
    "load_space": "hlnas.space",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'hlnas' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
