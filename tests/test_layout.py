import itertools
import json

import pytest

from hlnas.model.catalog import PAPER_MIXERS, linear_mixer_names
from hlnas.errors import LayoutError
from hlnas.model.layout import PAPER_RATIOS, PLACEMENTS, Layout, attention_indices, build_layout, parse_ratio, placement_of

PAPER_INDICES = {
    "24:1": [23],
    "12:1": [11, 23],
    "6:1": [5, 11, 17, 23],
    "3:1": [2, 5, 8, 11, 14, 17, 20, 23],
    "pure": [],
}


@pytest.mark.parametrize("ratio", PAPER_RATIOS)
def test_paper_placement_matches_released_checkpoints(ratio):
    assert list(build_layout("gla", ratio, 24).attention_layers) == PAPER_INDICES[ratio]


def test_placements_at_6_to_1():
    assert attention_indices(24, "6:1", "front") == (0, 1, 2, 3)
    assert attention_indices(24, "6:1", "back") == (20, 21, 22, 23)
    assert attention_indices(24, "6:1", "middle") == (10, 11, 12, 13)
    assert attention_indices(24, "6:1", "spread") == (0, 8, 15, 23)
    assert attention_indices(24, "24:1", "spread") == (12,)


@pytest.mark.parametrize("n_layers", [4, 6, 12, 24, 48])
def test_every_layout_has_the_ratio_and_round_trips(n_layers):
    # group counts r+1 layers a group and needs no divisibility: test_group_placement_is_r_linear_layers_then_attention
    for mixer, placement in itertools.product(linear_mixer_names(), [p for p in PLACEMENTS if p != "group"]):
        for r in range(2, n_layers + 1):
            if n_layers % r:
                with pytest.raises(LayoutError, match="does not divide"):
                    build_layout(mixer, f"{r}:1", n_layers, placement)
                continue
            layout = build_layout(mixer, f"{r}:1", n_layers, placement)
            idx = layout.attention_layers
            assert len(idx) == n_layers // r and len(set(idx)) == len(idx)
            assert all(0 <= i < n_layers for i in idx)
            assert layout.ratio in (f"{r}:1", "transformer" if r == 1 else "")
            assert Layout.parse(str(layout)) == layout
            assert Layout.from_json(layout.to_json()) == layout
            assert set(layout.mixers) - {"attention"} == {mixer}


def test_transformer_and_pure():
    t = build_layout("transformer", None, 12)
    assert t.attention_layers == tuple(range(12)) and t.ratio == "transformer"
    p = build_layout("deltanet", "pure", 12)
    assert p.attention_layers == () and p.ratio == "pure"


def test_explicit_indices_and_hetero():
    l = build_layout("gla", placement=[0, 7], n_layers=8)
    assert l.attention_layers == (0, 7) and l.ratio == "4:1"
    h = build_layout(["gla", "deltanet", "gla", "deltanet"], "2:1", placement="paper")
    assert h.mixers == ("gla", "attention", "gla", "attention")
    h2 = build_layout(["gla", "deltanet", "hgrn2"], placement=[2])
    assert h2.linear_mixers == ("gla", "deltanet") and h2.ratio == "3:1"
    assert Layout.parse(str(h2)) == h2


def test_aliases_are_canonicalized():
    assert build_layout("gdn", "6:1") == build_layout("gated_deltanet", "6:1")


def test_string_form_is_one_code_per_layer():
    assert str(build_layout("gated_deltanet", "6:1")) == "ZZZZZA" * 4
    assert str(build_layout("hgrn2", "3:1", 6)) == "NNANNA"


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: build_layout("gdn2x", "6:1"), "unknown mixer 'gdn2x'.*Available: transformer, hgrn"),
        (lambda: build_layout("gla", "5:1"), "ratio 5:1 does not divide 24 layers; ratios that do: 24:1, 12:1, 8:1"),
        (lambda: build_layout("gla", "6:2"), "ratio '6:2' is not allowed"),
        (lambda: build_layout("gla", "one"), "ratio 'one' is not allowed"),
        (lambda: build_layout("gla", placement=[3, 30]), r"attention index 30 is out of range; expected a value in \[0, 24\)"),
        (lambda: build_layout("gla", placement=[3, 3]), "repeat"),
        (lambda: build_layout("gla", "6:1", placement="diagonal"), "placement 'diagonal' is not allowed; allowed: paper, front"),
        (lambda: build_layout("attention", "6:1"), "not a linear mixer"),
        (lambda: build_layout(["gla", "attention"]), "layer 1: 'attention' is not a linear mixer"),
        (lambda: build_layout("transformer", "6:1"), "attention in every layer"),
        (lambda: Layout.parse("ZZQZ"), "unknown layout code 'Q'"),
        (lambda: Layout.parse(""), "empty"),
        (lambda: Layout.from_dict({"layout": "ZZA", "mixers": ["gla"]}), "disagrees"),
        (lambda: Layout.from_dict({"x": 1}), "needs 'mixers' or 'layout'"),
    ],
)
def test_bad_input_names_value_and_allowed(call, message):
    with pytest.raises(LayoutError, match=message):
        call()


def test_parse_ratio_forms():
    assert parse_ratio("pure") is None and parse_ratio(None) is None
    assert parse_ratio("6:1") == parse_ratio("6") == parse_ratio(6) == 6


def test_group_placement_is_r_linear_layers_then_attention():
    """Qwen3-Next's 3:1: three linear layers, then attention; counted back from the last layer, so 24 layers at 6:1
    start with a short group (two linear layers) and every ratio of the paper fits."""
    assert attention_indices(24, "3:1", "group") == (3, 7, 11, 15, 19, 23)
    assert attention_indices(24, "6:1", "group") == (2, 9, 16, 23)
    assert attention_indices(24, "12:1", "group") == (10, 23)
    assert attention_indices(24, "24:1", "group") == (23,) == attention_indices(24, "24:1", "paper")
    assert attention_indices(8, "3:1", "group") == (3, 7)
    l = build_layout("gla", "3:1", 8, "group")
    assert str(l) == "GGGAGGGA" and l.ratio == "4:1"  # the layout's own ratio: one attention layer in 4
    assert placement_of(build_layout("gla", "6:1", 24, "group")) == "group"


def test_sliding_window_layers_in_the_string_form():
    l = build_layout("gated_deltanet", "3:1", 6, attention="swa:1024")
    assert str(l) == "ZZS1024ZZS1024" and Layout.parse(str(l)) == l
    assert l.mixers[2] == "swa:1024" and l.attention_layers == l.window_layers == (2, 5) and l.ratio == "3:1"
    assert l.linear_mixers == ("gated_deltanet",) and "(swa:1024)" in l.describe()
    mixed = Layout.parse("ZS64ZA")  # windowed and full attention in one layout: both are its attention layers
    assert mixed.attention_layers == (1, 3) and mixed.window_layers == (1,) and mixed.ratio == "2:1"
    assert build_layout("gated_deltanet", "3:1", 6, attention="full") == build_layout("gated_deltanet", "3:1", 6)


def test_an_all_window_model_is_pure_not_the_transformer():
    """SWA-only layouts hold a bounded cache: pure, with the window as their mixer; beside full attention they are the
    bounded side of the hybrid."""
    swa = build_layout("swa:512", "pure", 4)
    assert str(swa) == "S512" * 4 and swa.ratio == "pure" and swa.attention_layers == ()
    assert swa.linear_mixers == ("swa:512",) and swa.window_layers == (0, 1, 2, 3)
    h = build_layout("swa:512", "2:1", 4)
    assert str(h) == "S512AS512A" and h.ratio == "2:1" and h.attention_layers == (1, 3)
    assert h.linear_mixers == ("swa:512",)
    assert build_layout("transformer", None, 4).ratio == "transformer"


@pytest.mark.parametrize("call, message", [
    (lambda: Layout.parse("ZZS"), "swa is written S<window>, e.g. S1024"),
    (lambda: Layout.parse("ZA12"), "attention is written A"),
    (lambda: Layout.parse("Z-Z"), "character '-' at 1 is not a layer code"),
    (lambda: Layout(("gla", "swa")), "swa needs a window in tokens, written swa:W"),
    (lambda: Layout(("gla", "swa:0")), "swa needs a window"),
    (lambda: build_layout("gla:4", "pure", 4), "only windowed kinds \\(swa\\) take ':W'"),
    (lambda: build_layout("gla", "2:1", 4, attention="swa"), "attention kind 'swa' is not allowed; allowed: full"),
    (lambda: build_layout("swa:8", "2:1", 4, attention="swa:4"), "with no recurrent mixer"),
])
def test_window_input_errors(call, message):
    with pytest.raises(LayoutError, match=message):
        call()


def test_paper_mixers_are_registered():
    assert set(PAPER_MIXERS) <= set(linear_mixer_names())
    assert json.loads(build_layout("hgrn", "12:1").to_json())["attention_layers"] == [11, 23]
