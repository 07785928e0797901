"""What the cost model alone knows of Table 7: predictors that train nothing, scored as ``hlnas validate`` scores a proxy
(``hlnas validate --state-bar PRESET`` prints the second beside any proxy).

* the attention share (the bar every proxy is held to);
* the share, ties within a ratio broken by the layout's recurrent-state bytes (hlnas's cost model at a paper scale):
  more memory for the linear layers, more recall;
* the layout's whole decode memory at a context: KV cache plus state bytes.

Each as Spearman rho against the reference over the cells both have, and as partial rho with the share held fixed.
The state order of the mixers depends on the scale (at 340M GLA and HGRN-2 hold equal states; at 1.3B GLA's is twice
HGRN-2's), so both paper scales are printed.

    python experiments/proxy/state_predictor.py                      # Table 7 and the Transformer, 24 layers
    python experiments/proxy/state_predictor.py --context 16384
"""
from __future__ import annotations

import argparse


def predictors(preset: str, layers: int, context: int, reference: str = "table7+transformer") -> dict:
    """{predictor: (rho, partial rho given the share)} over the reference's (mixer, ratio) cells."""
    from hlnas.analysis.paper import attention_share
    from hlnas.analysis.rankstats import partial_spearman, spearman_rho
    from hlnas.analysis.validate import state_ranks
    from hlnas.analysis.validation_data import load_reference
    from hlnas.model.config import PRESETS
    from hlnas.model.cost import layout_cost
    from hlnas.model.layout import build_layout

    values = load_reference(reference).values
    cells = [(mixer, ratio) for mixer, ratio, _ in values]
    ref = list(values.values())
    share = [attention_share(r) for _, r in cells]  # the Transformer's ratio is "full"
    memory = []  # the whole decode memory at the context: KV cache plus state
    for mixer, ratio in cells:
        cost = layout_cost(build_layout(mixer, "pure" if mixer == "transformer" else ratio, layers), PRESETS[preset],
                           context=context)
        memory.append(cost.state_bytes + cost.kv_cache_bytes)
    out = {"attention share": (spearman_rho(share, ref), None)}
    for name, x in (("share, then state bytes", state_ranks([(m, r, None) for m, r in cells], preset, layers)),
                    (f"KV + state bytes at {context}", memory)):
        out[name] = (spearman_rho(x, ref), partial_spearman(x, ref, share))
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=24, help="depth of every layout (default 24, the paper's)")
    p.add_argument("--context", type=int, default=4096, help="context of the KV cache (default 4096)")
    p.add_argument("--reference", default="table7+transformer", help="a shipped reference (default table7+transformer)")
    a = p.parse_args(argv)
    print("| predictor (trains nothing) | scale | rho | partial rho, share held fixed |\n|---|---|---|---|")
    for preset in ("paper-340m", "paper-1.3b"):
        for name, (rho, partial) in predictors(preset, a.layers, a.context, a.reference).items():
            shown = "-" if partial is None else f"{partial:+.3f}"
            print(f"| {name} | {preset} | {rho:+.3f} | {shown} |")


if __name__ == "__main__":
    main()
