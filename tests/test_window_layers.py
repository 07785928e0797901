"""Sliding-window attention as a layer kind in spaces: the ``attention`` dimension (full or swa:W attention layers), a
window as a space's mixer (an all-SWA model is pure), and the calibration keeping the full-attention control."""

from __future__ import annotations

import pytest

from hlnas.calibration.protocol import plan
from hlnas.model.cost import layout_cost
from hlnas.model.layout import Layout
from hlnas.space import SpaceError, load_space

TINY = load_space("tiny")


def test_attention_kinds_are_a_dimension():
    sp = TINY.with_overrides(attention_kinds=["full", "swa:16"])
    assert sp.params()["attention"] == ["full", "swa:16"]
    full = sp.layout({"mixer": "hgrn", "ratio": "3:1", "placement": "paper", "attention": "full"})
    swa = sp.layout({"mixer": "hgrn", "ratio": "3:1", "placement": "paper", "attention": "swa:16"})
    assert str(full) == "HHAHHA" and str(swa) == "HHS16HHS16" and swa.ratio == "3:1"
    # the window's KV is bounded at the space's context; full attention's grows with it
    assert layout_cost(swa, sp.model, context=sp.kv_context).kv_cache_bytes * sp.kv_context == \
        layout_cost(full, sp.model, context=sp.kv_context).kv_cache_bytes * 16
    assert sp.to_dict()["attention"] == ["full", "swa:16"]
    assert "attention" not in TINY.to_dict() and "attention" not in TINY.params()  # old spaces' fingerprints stay


def test_one_kind_is_no_dimension_and_windows_every_hybrid():
    sp = TINY.with_overrides(attention_kinds=["swa:8"])
    assert "attention" not in sp.params()
    assert str(sp.layout({"mixer": "hgrn2", "ratio": "6:1", "placement": "paper"})) == "NNNNNS8"


def test_an_all_window_model_is_pure_in_the_calibration():
    """The control stays the full-attention Transformer; a window among the mixers is calibrated as a pure model (all
    SWA: its cache does not grow) and as a hybrid beside full attention."""
    sp = TINY.with_overrides(mixers=["hgrn", "swa:16"], attention_kinds=["full", "swa:16"])
    runs = {(r.role, r.mixer): r for r in plan(sp) if r.seed == 0}
    assert runs[("control", "transformer")].layout == "AAAAAA"
    pure = runs[("pure", "swa:16")]
    assert pure.layout == "S16" * 6 and Layout.parse(pure.layout).ratio == "pure"
    assert pure.params == {"mixer": "swa:16", "ratio": "pure", "placement": "paper", "attention": "full"}
    assert runs[("hybrid", "swa:16")].layout == "S16S16AS16S16A"
    assert runs[("hybrid", "hgrn")].params["attention"] == "full"  # the calibration's hybrids hold full attention


@pytest.mark.parametrize("change, message", [
    ({"attention": ["swa"]}, r"attention\[0\]='swa' is not allowed; allowed: full, swa:<window>"),
    ({"attention": ["full", "full"]}, r"attention\[1\]='full' repeats attention\[0\]"),
    ({"attention": []}, "attention is empty"),
    ({"mixers": ["hgrn", "swa:x"]}, r"mixers\[1\]='swa:x' is not allowed; .*swa:<window>"),
])
def test_bad_attention_settings_name_the_key(change, message):
    raw = {**TINY.to_dict(), **change}
    from hlnas.space import space_from_dict

    with pytest.raises(SpaceError, match=message):
        space_from_dict(raw, where="x.yaml")
