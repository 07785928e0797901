"""``hlnas export``: a study's trial, its Pareto front, or a layout string, taken to a scale as fla model configs.

Each export is a folder holding ``config.json`` (:func:`hlnas.analysis.fla_config.fla_config`: the fla model family of
the layout's linear mixer, ``attn`` naming the attention layers) and ``README.md`` (where the layout came from, the
scale, hlnas's cost of it there, the line that trains it, and what fla builds differently, if anything). A trial's
export carries what the candidate was trained with (the study's model settings: short convolutions, heads, gates,
window); a bare layout string takes hlnas's defaults.

:func:`fla_cost` builds a config with fla's own ``AutoModelForCausalLM.from_config`` on the meta device (no weights,
no kernels run) and counts what it holds, as hlnas's cost model counts: every parameter; attention keys and values at
the context (windows capped); recurrent states in float32 and each short convolution's last ``size - 1`` inputs in the
activation dtype (fla's own conv cache keeps one column more, ``[N, D, size]``). ``hlnas export --check`` and
tests/test_export.py hold every exported config to the cost model: parameters within 1 %, KV cache and state exact.
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from dataclasses import dataclass

from hlnas.analysis.fla_config import RWKV7_BLOCK_NOTE, ExportError, Scale, at_depth, fla_config, scaled_model
from hlnas.errors import HlnasError, LayoutError
from hlnas.model.config import ModelConfig
from hlnas.model.cost import LayoutCost, layout_cost, parse_dtype
from hlnas.model.layout import Layout

__all__ = ["Candidate", "Export", "export", "study_candidates", "study_model", "write_export", "readme_text", "train_line", "fla_cost",
           "compare_costs", "front_exports", "export_command", "PARAM_TOLERANCE"]

PARAM_TOLERANCE = 0.01  # fla's families add small parameters hlnas's blocks lack (HGRN's model-wide lower bounds)


@dataclass(frozen=True)
class Candidate:
    """A layout to export: its folder name, the settings it was trained with (None: hlnas's defaults), where it is from."""

    label: str
    layout: Layout
    trained: ModelConfig | None
    source: str


@dataclass(frozen=True)
class Export:
    candidate: Candidate
    scale: Scale
    layout: Layout | None  # at the scale's depth
    model: ModelConfig | None  # at the scale, the MLP width resolved
    config: dict | None  # fla's config.json, or None when refused
    refusal: str | None
    cost: LayoutCost | None
    context: int


def export(candidate: Candidate, scale: Scale, *, context: int = 4096) -> Export:
    """``candidate`` at ``scale``: its fla config and hlnas's cost there, or the one-line refusal."""
    try:
        model = scaled_model(scale, candidate.trained, candidate.layout.n_layers)
        try:
            layout = at_depth(candidate.layout, model.n_layers)
        except LayoutError as e:
            raise ExportError(f"re-laying {candidate.layout} at {model.n_layers} layers: {e}") from None
        model = model.replace(n_layers=layout.n_layers)
        config = fla_config(layout, model, context=context)
        cost = layout_cost(layout, model, context=context, dtype="bf16")
    except (ExportError, LayoutError) as e:
        return Export(candidate, scale, None, None, None, str(e), None, context)
    except HlnasError as e:  # a carried setting invalid at the new width, a bad explicit scale
        return Export(candidate, scale, None, None, None, f"at {scale.describe()}: {e}", None, context)
    from hlnas.model.cost import resolve_config

    return Export(candidate, scale, layout, resolve_config(layout, model), config, None, cost, context)


def study_model(study) -> ModelConfig | None:
    """The model settings a study's candidates were trained with: its stored space's model (None where it holds none)."""
    from hlnas.space import space_from_dict

    stored = study.user_attrs.get("hlnas_space")
    return space_from_dict(stored, where=f"study '{study.study_name}'").model if stored else None


def study_candidates(storage: str, study_name: str, *, trials: tuple[int, ...] = (), front: bool = False) -> list[Candidate]:
    """The given trials, or the study's Pareto front (as ``hlnas status`` lists it), with the study's model settings."""
    from hlnas.search.records import front_rows
    from hlnas.search.study import load_hlnas_study

    study = load_hlnas_study(storage, study_name)
    trained = study_model(study)
    if front:
        numbers = [r["number"] for r in front_rows(study)]
        if not numbers:
            raise HlnasError(f"study '{study_name}' has no front yet (no feasible completed trial); give a --trial or a layout")
    else:
        numbers = list(trials)
    by_number = {t.number: t for t in study.get_trials(deepcopy=False)}
    out = []
    for n in numbers:
        if n not in by_number or not by_number[n].user_attrs.get("layout"):
            have = sorted(k for k, t in by_number.items() if t.user_attrs.get("layout"))
            raise HlnasError(f"study '{study_name}' has no trial #{n} with a layout; trials with one: "
                             f"{', '.join(map(str, have[:20]))}{' ...' if len(have) > 20 else ''}")
        out.append(Candidate(f"trial-{n}", Layout.parse(by_number[n].user_attrs["layout"]), trained,
                             f"study '{study_name}' trial #{n} ({storage})"))
    return out


def train_line(folder: str, vocab: int) -> str:
    """The one line that trains an exported config."""
    return (f"Train it with flame (`bash train.sh --job.config_file flame/models/fla.toml --model.config {folder}/config.json "
            f"--model.tokenizer_path <a tokenizer of {vocab} tokens> ...`) or any Hugging Face trainer on "
            f"`AutoModelForCausalLM.from_config(AutoConfig.from_pretrained('{folder}'))` after `import fla`.")


def readme_text(exp: Export, folder: str) -> str:
    c, cost, cfg = exp.candidate, exp.cost, exp.config
    notes = [RWKV7_BLOCK_NOTE] if cfg["model_type"] == "rwkv7" else []
    carried = (exp.candidate.trained.mixer_hparams if exp.candidate.trained else None) or {}
    lines = [f"# {c.label}: {exp.layout.describe()}", "",
             train_line(folder, cfg["vocab_size"]), "",
             f"- layout: `{exp.layout}` (from {c.source}; as searched: `{c.layout}`)",
             f"- scale: {exp.scale.describe()}: d_model {exp.model.d_model}, {exp.model.n_layers} layers, "
             f"{exp.model.n_heads} attention heads ({exp.model.kv_heads} kv), vocabulary {exp.model.vocab_size}, MLP "
             f"width {exp.model.mlp_hidden}",
             f"- fla family: `{cfg['model_type']}` (fla 0.6.0); attention layers {list(exp.layout.attention_layers)}",
             f"- settings carried from training: {json.dumps(carried) if carried else 'none (hlnas defaults)'}",
             f"- hlnas cost at {exp.context} tokens, bf16: {cost.params:,} parameters, KV cache {cost.kv_cache_bytes:,} B, "
             f"recurrent state {cost.state_bytes:,} B",
             *(f"- note: {n}" for n in notes)]
    return "\n".join(lines) + "\n"


def write_export(exp: Export, out_dir: str) -> list[str]:
    """Write ``out_dir/config.json`` and ``out_dir/README.md``; returns their paths."""
    if exp.config is None:
        raise ExportError(exp.refusal)
    from hlnas.outputs import missing_dirs, remove_dirs, remove_quietly, write_atomic

    made = missing_dirs(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    paths = [os.path.join(out_dir, "config.json"), os.path.join(out_dir, "README.md")]
    wrote = []
    try:  # each file whole or not at all; both, or neither (a full disk)
        write_atomic(paths[0], json.dumps(exp.config, indent=2) + "\n")
        wrote.append(paths[0])
        write_atomic(paths[1], readme_text(exp, out_dir))
    except BaseException:
        remove_quietly(*wrote)
        remove_dirs(made)
        raise
    return paths


# -- the check: fla builds what hlnas costed -----------------------------------------------------------
def _never_called(*args, **kwargs):
    raise RuntimeError("a model built to be counted was run")


def _skip(*args, **kwargs):
    return None


@contextlib.contextmanager
def _counting_build():
    """What a build only to count needs from fla, put back after: fla's Attention refuses to build without the
    flash-attn package, which only its forward calls, so it gets a stand-in; RWKV-7's initialisers loop over every
    channel in Python (seconds a layer) to set values a count never reads, so they are skipped."""
    import fla.layers.attn as attn
    import fla.layers.rwkv6 as rwkv6
    import fla.layers.rwkv7 as rwkv7

    patches = [(rwkv7.RWKV7Attention, "_initialize_weights", _skip), (rwkv6.LoRA, "_initialize_weights", _skip)]
    if attn.flash_attn_func is None:
        patches.append((attn, "flash_attn_func", _never_called))
    saved = [(owner, name, owner.__dict__[name]) for owner, name, _ in patches]
    try:
        for owner, name, value in patches:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)


def _state_entries(layer) -> tuple[int, int]:
    """(recurrent-state elements kept in float32, elements kept in the activation dtype) of one fla mixer layer."""
    from fla.modules import ShortConvolution

    kind = type(layer).__name__
    if kind == "HGRNAttention":
        rec = layer.input_dim  # a vector state
    elif kind == "HGRN2Attention":
        rec = layer.num_heads * layer.head_f_dim * layer.head_i_dim
    elif kind == "RWKV7Attention":
        rec = layer.num_heads * layer.head_dim * layer.head_v_dim
    else:  # GatedDeltaNet, KimiDeltaAttention (value heads), DeltaNet, GatedLinearAttention, MultiScaleRetention
        rec = getattr(layer, "num_v_heads", layer.num_heads) * layer.head_k_dim * layer.head_v_dim
    act = layer.hidden_size if kind == "RWKV7Attention" else 0  # its token shift: the last token
    act += sum((m.kernel_size[0] - 1) * m.in_channels for m in layer.modules() if isinstance(m, ShortConvolution))
    return rec, act


def fla_cost(config: dict, *, context: int = 4096, batch: int = 1, dtype: str = "bf16") -> dict:
    """Build ``config`` with fla's ``AutoModelForCausalLM.from_config`` on the meta device and count it: ``params``,
    ``kv_cache_bytes``, ``state_bytes`` (the token mixers'), ``channel_mix_state_bytes`` (RWKV-7's channel-mix token
    shift, which hlnas's SwiGLU blocks lack)."""
    import torch

    itemsize = parse_dtype(dtype).itemsize
    with warnings.catch_warnings():  # fla warns that Triton has no CPU backend, and about its RWKV-7 port
        warnings.simplefilter("ignore")
        import fla.layers.attn as fla_attn
        import fla.models  # noqa: F401  (registers fla's families with transformers' Auto classes)
        from transformers import AutoConfig, AutoModelForCausalLM

        cfg = AutoConfig.for_model(config["model_type"], **{k: v for k, v in config.items() if k != "model_type"})
        with _counting_build(), torch.device("meta"):
            model = AutoModelForCausalLM.from_config(cfg)
    kv = state = channel = 0
    for block in model.model.layers:
        layer = block.attn
        if isinstance(layer, fla_attn.Attention):
            held = context if layer.window_size is None else min(context, layer.window_size)
            kv += 2 * layer.num_kv_heads * layer.head_dim * held * batch * itemsize
        else:
            rec, act = _state_entries(layer)
            state += batch * (rec * 4 + act * itemsize)  # recurrent states in float32, as hlnas's and fla's kernels keep
        if type(getattr(block, "ffn", None)).__name__ == "RWKV7FeedForward":
            channel += batch * cfg.hidden_size * itemsize
    return {"params": sum(p.numel() for p in model.parameters()), "kv_cache_bytes": kv, "state_bytes": state,
            "channel_mix_state_bytes": channel}


def compare_costs(exp: Export) -> list[str]:
    """How fla's build of ``exp`` differs from hlnas's cost beyond the allowed (parameters 1 %, KV and state exact); []
    when it matches."""
    got = fla_cost(exp.config, context=exp.context)
    want = exp.cost
    problems = []
    rel = abs(got["params"] - want.params) / want.params
    if rel > PARAM_TOLERANCE:
        problems.append(f"parameters: fla {got['params']:,}, hlnas {want.params:,} ({rel:.2%} apart)")
    for key in ("kv_cache_bytes", "state_bytes"):
        if got[key] != getattr(want, key):
            problems.append(f"{key}: fla {got[key]:,}, hlnas {getattr(want, key):,}")
    return problems


# -- where the front offers it ----------------------------------------------------------------------------
def export_command(study: str, number: int, storage: str | None = None, scale: str = "paper-340m") -> str:
    where = f"--storage {storage} " if storage else ""
    return f"hlnas export {where}--study {study} --trial {number} --scale {scale} --out fla/trial-{number}"


def front_exports(rows: list[dict], trained: ModelConfig | None, study: str, storage: str | None = None,
                  scale: str = "paper-340m") -> list[dict]:
    """Per front member (rows of :func:`hlnas.search.records.front_rows`): the command that exports it at ``scale``,
    or why fla cannot build it (checked now: the mapping alone, fla is not imported)."""
    out = []
    for r in rows:
        try:
            layout = Layout.parse(r["layout"])
        except (HlnasError, TypeError):
            continue
        exp = export(Candidate(f"trial-{r['number']}", layout, trained, study), Scale(preset=scale))
        out.append({"number": r["number"], "layout": r["layout"], "refusal": exp.refusal,
                    "command": None if exp.refusal else export_command(study, r["number"], storage, scale)})
    return out
