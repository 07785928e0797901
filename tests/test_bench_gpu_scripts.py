"""The GPU benchmarks of issue #22 (experiments/bench: paper_scale, decode_memory, trial_overhead) on their tiny CPU
paths: each writes its CSV (with an ``mfu`` column where it applies) and a markdown table naming the command and
its same-run baseline, and what they compare is exact. No timing is asserted. The decode-memory equality on a
GPU's allocator is the ``gpu`` test at the end (run by h200.sh's check step)."""

from __future__ import annotations

import csv
import os

import pytest
import torch

from experiments.bench import decode_memory, lm_step, paper_scale, trial_overhead
from experiments.bench.results import PEAK_BF16
from hlnas.model.cost import layout_cost, resolve_config
from hlnas.model.config import preset
from hlnas.model.layout import Layout, build_layout
from hlnas.model.build import build_model


pytestmark = pytest.mark.usefixtures("one_thread")


def _rows(folder, name):
    (path,) = folder.glob(f"{name}_cpu_*.csv")
    with open(path) as f:
        return list(csv.DictReader(f)), path.with_suffix(".md").read_text()


# -- paper_scale ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["proxy-tiny", "paper-340m"])
def test_plain_baseline_has_the_transformers_parameter_count(name):
    cfg, layout = preset(name), build_layout("transformer", None)
    with torch.device("meta"):  # paper-340m without allocating it
        plain = paper_scale.plain_transformer(resolve_config(layout, cfg))
        ours = build_model(layout, cfg)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(plain) == count(ours) == layout_cost(layout, cfg).params


def test_paper_scale_cpu_smoke(tmp_path):
    args = ["--preset", "proxy-tiny", "--layers", "6", "--batch", "2", "--seq-len", "16", "--steps", "1", "--warmup", "0",
            "--only", "matmul,plain,transformer,gla:3:1,gla:3:1@composed", "--profile", "--device-name", "cpu",
            "--out", str(tmp_path)]
    assert paper_scale.main(args) == 0
    rows, md = _rows(tmp_path, "paper_scale")
    assert [r["row"] for r in rows] == ["matmul", "plain", "transformer", "gla:3:1", "gla:3:1@composed"]
    assert "mfu" in rows[0] and all(r["status"] == "ok" for r in rows)
    by = {r["row"]: r for r in rows}
    assert by["plain"]["params_m"] == by["transformer"]["params_m"] and float(by["plain"]["tok_s_vs_plain"]) == 1.0
    assert float(by["transformer"]["tok_s_vs_plain"]) > 0 and by["gla:3:1"]["mode"] == "eager"
    assert "Command: `python -m experiments.bench.paper_scale --preset proxy-tiny" in md
    assert "HLNAS_TRITON_AUTOTUNE=" in md and "Baseline: the `plain` row" in md
    (prof,) = tmp_path.glob("paper_scale_profile_cpu_*.md")
    text = prof.read_text()
    assert "## plain" in text and "## gla:3:1" in text and "aten::" in text
    assert "## gla:3:1@composed" in text  # a variant row's profile is headed by its own name, not its base row's
    assert text.count("Every kernel by kind") == 4 and "| matmul |" in text and "limited by " in text


def test_rows_take_rope_as_shipped_and_the_rope_variants_force_the_table_or_not(tmp_path, monkeypatch):
    """A row without a RoPE flag runs what hlnas trains with (hlnas.model.nn.ROPE_TABLE as set), @norope computes cos/sin in
    place and @rope takes the table, each for its own row only, set against the same row without."""
    import hlnas.model.nn as hnn

    seen = []  # the table setting at each rotation, in row order
    real = hnn._cos_sin
    monkeypatch.setattr(hnn, "_cos_sin", lambda x, o, t, table: seen.append(hnn.ROPE_TABLE if table is None else table)
                        or real(x, o, t, table))
    args = ["--preset", "proxy-tiny", "--layers", "6", "--batch", "2", "--seq-len", "16", "--steps", "1", "--warmup", "0",
            "--only", "transformer,transformer@norope", "--device-name", "cpu", "--out", str(tmp_path)]
    for shipped in (True, False):
        monkeypatch.setattr(hnn, "ROPE_TABLE", shipped)
        seen.clear()
        assert paper_scale.main(args) == 0 and hnn.ROPE_TABLE is shipped  # put back after the rows
        half = len(seen) // 2  # both rows train the same steps
        assert seen[:half] == [shipped] * half and seen[half:] == [False] * half
    by = {r["row"]: r for r in _rows(tmp_path, "paper_scale")[0]}
    assert by["transformer@norope"]["mode"] == "eager+norope" and by["transformer"]["mode"] == "eager"
    assert float(by["transformer@norope"]["tok_s_vs_own"]) > 0 and not by["transformer"].get("tok_s_vs_own")
    seen.clear()
    assert paper_scale.main([*args[:-5], "transformer@rope", *args[-4:]]) == 0
    assert seen and set(seen) == {True} and hnn.ROPE_TABLE is False
    with pytest.raises(SystemExit, match="unknown variant ropes; allowed, joined by '\\+': compile, rope, norope, composed, logits, torchconv, torchl2norm, atenconv, chunkN"):
        paper_scale.main([*args[:-5], "transformer@ropes", *args[-4:]])


def test_a_torchconv_row_keeps_the_short_convs_on_pytorch_for_that_row_only(tmp_path, monkeypatch):
    """@torchconv: HLNAS_TORCH_OPS names causal_conv1d while the row builds and trains (the route reads it at each
    call), beside what the user had set, and is restored after; its row is set against its own."""
    import hlnas.model.kernels.backends as backends

    seen = []
    real = backends.route
    monkeypatch.setattr(backends, "route", lambda op, *a, **k: (seen.append((op, os.environ.get("HLNAS_TORCH_OPS")))
                                                                or real(op, *a, **k)))
    monkeypatch.setenv("HLNAS_TORCH_OPS", "simple_gla")
    args = ["--preset", "proxy-tiny", "--layers", "6", "--batch", "2", "--seq-len", "16", "--steps", "1", "--warmup", "0",
            "--only", "deltanet:3:1,deltanet:3:1@torchconv", "--device-name", "cpu", "--out", str(tmp_path)]
    assert paper_scale.main(args) == 0 and os.environ["HLNAS_TORCH_OPS"] == "simple_gla"
    convs = [env for op, env in seen if op == "causal_conv1d"]
    assert convs[0] == "simple_gla" and convs[-1] == "simple_gla,causal_conv1d"
    by = {r["row"]: r for r in _rows(tmp_path, "paper_scale")[0]}
    assert by["deltanet:3:1@torchconv"]["mode"].endswith("+torchconv")
    assert float(by["deltanet:3:1@torchconv"]["tok_s_vs_own"]) > 0
    # @torchl2norm, and both at once: each names its op for that row
    seen.clear()
    args[-5] = "deltanet:3:1@torchl2norm,deltanet:3:1@torchconv+torchl2norm"
    assert paper_scale.main(args) == 0 and os.environ["HLNAS_TORCH_OPS"] == "simple_gla"
    norms = [env for op, env in seen if op == "l2norm"]
    assert norms[0] == "simple_gla,l2norm" and norms[-1] == "simple_gla,causal_conv1d,l2norm"
    by = {r["row"]: r for r in _rows(tmp_path, "paper_scale")[0]}
    assert by["deltanet:3:1@torchconv+torchl2norm"]["mode"].endswith("+torchconv+torchl2norm")


def test_a_composed_row_runs_the_composed_gated_norm_against_its_lean_row(tmp_path, monkeypatch):
    """@composed: the gated norms' composed form for that row only (LEAN_GATED_NORM off, restored after), set against
    the same row with the lean norm (the fused forms on, as on CUDA; the GPU run measures the difference)."""
    import hlnas.model.nn as hnn

    seen = []
    real = hnn.lean_gated_norm
    monkeypatch.setattr(hnn, "FUSED_ON_CPU", True)
    monkeypatch.setattr(hnn, "lean_gated_norm", lambda *a, **k: seen.append(1) or real(*a, **k))
    args = ["--preset", "proxy-tiny", "--layers", "6", "--batch", "2", "--seq-len", "16", "--steps", "1", "--warmup", "0",
            "--only", "gla:3:1@composed", "--device-name", "cpu", "--out", str(tmp_path)]
    assert paper_scale.main(args) == 0 and not seen and hnn.LEAN_GATED_NORM  # composed throughout, then restored
    assert paper_scale.main([*args[:-5], "gla:3:1,gla:3:1@composed", *args[-4:]]) == 0 and seen
    by = {r["row"]: r for r in _rows(tmp_path, "paper_scale")[0]}
    assert by["gla:3:1@composed"]["mode"] == "eager+composed+chunked_ce"
    assert float(by["gla:3:1@composed"]["tok_s_vs_own"]) > 0


def test_a_logits_row_takes_the_whole_logits_loss_against_its_chunked_row(tmp_path, monkeypatch):
    """With the fused forms on (as on CUDA) hlnas's rows take the head's loss in chunks and the plain row the whole
    logits; @logits takes the whole logits for that row only, set against its own row."""
    import hlnas.model.nn as hnn
    import hlnas.training.head_loss as head_loss

    monkeypatch.setattr(hnn, "FUSED_ON_CPU", True)
    args = ["--preset", "proxy-tiny", "--layers", "6", "--batch", "2", "--seq-len", "16", "--steps", "1", "--warmup", "0",
            "--only", "plain,transformer,transformer@logits", "--device-name", "cpu", "--out", str(tmp_path)]
    assert paper_scale.main(args) == 0 and head_loss.CHUNKED_HEAD_LOSS
    by = {r["row"]: r for r in _rows(tmp_path, "paper_scale")[0]}
    assert by["plain"]["mode"] == "eager" and by["transformer"]["mode"] == "eager+chunked_ce"
    assert by["transformer@logits"]["mode"] == "eager" and float(by["transformer@logits"]["tok_s_vs_own"]) > 0


def test_a_chunk_row_computes_the_head_loss_in_chunks_of_that_many_mib(tmp_path, monkeypatch):
    """@chunkN: the chunked head loss with N MiB of float32 logits a chunk for that row only (CHUNK_LOGIT_BYTES,
    restored after), set against its own row; a malformed N is refused in one line."""
    import hlnas.model.nn as hnn
    import hlnas.training.head_loss as head_loss

    chunks = []
    real = head_loss._LinearCrossEntropy.apply
    monkeypatch.setattr(hnn, "FUSED_ON_CPU", True)
    monkeypatch.setattr(head_loss._LinearCrossEntropy, "apply", lambda h, w, t, c: chunks.append(c) or real(h, w, t, c))
    monkeypatch.setattr(head_loss, "CHUNK_LOGIT_BYTES", 4 * 2**10)  # 4 KiB: 4 tokens a chunk at proxy-tiny's vocab 256
    args = ["--preset", "proxy-tiny", "--layers", "6", "--batch", "2", "--seq-len", "16", "--steps", "1", "--warmup", "0",
            "--only", "transformer,transformer@chunk1", "--device-name", "cpu", "--out", str(tmp_path)]
    assert paper_scale.main(args) == 0 and head_loss.CHUNK_LOGIT_BYTES == 4 * 2**10
    assert set(chunks) == {4, 2**20 // (4 * 256)}  # the default row's 4 tokens, then 1 MiB's 1,024
    by = {r["row"]: r for r in _rows(tmp_path, "paper_scale")[0]}
    assert by["transformer@chunk1"]["mode"] == "eager+chunked_ce+chunk1"
    assert float(by["transformer@chunk1"]["tok_s_vs_own"]) > 0
    for bad in ("chunk", "chunk0", "chunkx"):
        with pytest.raises(SystemExit, match=f"unknown variant {bad}; allowed.*chunkN"):
            paper_scale.main([*args[:-6], "--only", f"transformer@{bad}", "--device-name", "cpu", "--out", str(tmp_path)])


def test_recall_space_rows_time_the_spaces_recall_model_not_the_preset(tmp_path):
    """--recall-space: the rows build the fresh recall model of the space's score.mqar (its width, vocabulary, mixer
    options), written as recall_step_* so a paper-scale table of the same day is not overwritten."""
    from hlnas.model.layout import Layout
    from hlnas.model.build import seeded_model
    from hlnas.recall.proxy import recall_model_config
    from hlnas.space import builtin_spaces, load_space

    args = ["--recall-space", "tiny", "--layers", "6", "--batch", "2", "--seq-len", "16", "--steps", "1", "--warmup", "0",
            "--only", "plain,transformer,gla:3:1", "--profile", "--device-name", "cpu", "--out", str(tmp_path)]
    assert paper_scale.main(args) == 0
    rows, md = _rows(tmp_path, "recall_step")
    assert not list(tmp_path.glob("paper_scale_*"))
    space = load_space(builtin_spaces()["tiny"])
    mq = space.score.mqar
    rcfg = recall_model_config(space.model, dict(mq.model), mq.vocab)
    want = sum(p.numel() for p in seeded_model(Layout.parse(str(build_layout("gla", "3:1", 6))), rcfg, 0).parameters())
    by = {r["row"]: r for r in rows}
    assert float(by["gla:3:1"]["params_m"]) == round(want / 1e6, 2) and all(r["status"] == "ok" for r in rows)
    assert "Recall-model training speed" in md and "the recall model of tiny" in md
    assert (tmp_path / next(tmp_path.glob("recall_step_profile_cpu_*.md")).name).read_text().count("## ") == 3


def test_a_compile_row_trains_its_model_under_torch_compile_and_is_set_against_its_own_row(tmp_path, monkeypatch):
    """``row@compile`` (issue #21 point 2): the same model handed to the step through torch.compile (spied here: a
    real inductor compile costs 20+ s on a CPU), with its tokens/s over the uncompiled row of the same run."""
    compiled = []

    def spy(model, *a, **k):
        compiled.append(type(model).__name__)
        return model

    monkeypatch.setattr(torch, "compile", spy)
    args = ["--preset", "proxy-tiny", "--layers", "6", "--batch", "2", "--seq-len", "16", "--steps", "1", "--warmup", "0",
            "--only", "transformer,transformer@compile", "--device-name", "cpu", "--out", str(tmp_path)]
    assert paper_scale.main(args) == 0
    rows, md = _rows(tmp_path, "paper_scale")
    by = {r["row"]: r for r in rows}
    # as train.compile does it: each of the 6 blocks (hlnas.training.step.RegionalCompiled)
    assert compiled == ["Block"] * 6 and by["transformer@compile"]["mode"] == "eager+compile"
    assert by["transformer"]["tok_s_vs_own"] == "" and float(by["transformer@compile"]["tok_s_vs_own"]) > 0
    assert by["transformer"]["params_m"] == by["transformer@compile"]["params_m"] and "tok/s vs own row" in md
    with pytest.raises(SystemExit, match="unknown variant jit; allowed, joined by '\\+': compile"):
        paper_scale.main(args[:-6] + ["--only", "transformer@jit", "--device-name", "cpu", "--out", str(tmp_path)])


def test_an_atenconv_row_keeps_conv1d_under_compile_for_that_row_and_is_set_against_the_compiled_row(tmp_path, monkeypatch):
    """``row@compile+atenconv``: the short convs stay aten's conv1d under torch.compile (SHIFTED_SUM_UNDER_COMPILE off
    while the row trains, restored after), its tokens/s over the ``@compile`` row's; flags combine with '+'."""
    import hlnas.model.kernels.causal_conv1d as conv

    seen = []
    monkeypatch.setattr(torch, "compile", lambda model, *a, **k: seen.append(conv.SHIFTED_SUM_UNDER_COMPILE) or model)
    args = ["--preset", "proxy-tiny", "--layers", "6", "--batch", "2", "--seq-len", "16", "--steps", "1", "--warmup", "0",
            "--only", "deltanet:3:1@compile,deltanet:3:1@compile+atenconv", "--device-name", "cpu", "--out", str(tmp_path)]
    assert paper_scale.main(args) == 0 and conv.SHIFTED_SUM_UNDER_COMPILE is True
    assert seen == [True] * 6 + [False] * 6  # each row's 6 blocks, compiled with the row's setting
    by = {r["row"]: r for r in _rows(tmp_path, "paper_scale")[0]}
    assert by["deltanet:3:1@compile+atenconv"]["mode"] == "eager+compile+atenconv"
    assert float(by["deltanet:3:1@compile+atenconv"]["tok_s_vs_own"]) > 0 and by["deltanet:3:1@compile"]["tok_s_vs_own"] == ""


def test_lm_step_sets_the_graph_and_the_compiled_model_against_eager(tmp_path, monkeypatch):
    """lm_step (issue #22 point 1): per layout the eager step first, then the graph and the compiled model in the graph,
    each with its ratio to eager; on a CPU the graph runs eager (step_mode says so). torch.compile is spied here."""
    compiled = []
    monkeypatch.setattr(torch, "compile", lambda model, *a, **k: compiled.append(1) or model)
    args = ["--layouts", "transformer,gla:4:1", "--layers", "4", "--steps", "4", "--d-model", "32", "--heads", "2",
            "--seq-len", "16", "--batch", "2", "--modes", "compile,graph", "--device-name", "cpu", "--out", str(tmp_path)]
    assert lm_step.main(args) == 0
    rows, md = _rows(tmp_path, "lm_step")
    assert [(r["layout"], r["mode"]) for r in rows] == [(lay, m) for lay in ("AAAA", "GGGA") for m in ("eager", "compile", "graph")]
    # train.compile compiles block by block: the 4 blocks of each layout's compile row
    assert len(compiled) == 8 and all(r["step_mode"] == "eager" for r in rows) and "mfu" in rows[0]
    assert all((r["ratio"] == "") == (r["mode"] == "eager") for r in rows) and "vs eager" in md
    with pytest.raises(SystemExit, match="--modes: unknown jit; allowed: eager, graph, compile"):
        lm_step.main(args[:-6] + ["--modes", "jit", "--device-name", "cpu", "--out", str(tmp_path)])


def test_paper_scale_out_of_memory_is_a_row(tmp_path, monkeypatch):
    import hlnas.training.step

    def oom(*a, **k):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")

    monkeypatch.setattr(hlnas.training.step, "make_step", oom)
    args = ["--preset", "proxy-tiny", "--layers", "6", "--batch", "1", "--seq-len", "8", "--steps", "1",
            "--only", "mamba2:pure,transformer", "--device-name", "cpu", "--out", str(tmp_path)]
    assert paper_scale.main(args) == 0
    rows, md = _rows(tmp_path, "paper_scale")
    assert [r["status"][:4] for r in rows] == ["oom:", "oom:"] and "Tried to allocate 80.00 GiB" in md


def test_paper_scale_autotune_compare_runs_both_modes_side_by_side(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the children, as _one_thread does here
    args = ["--preset", "proxy-tiny", "--layers", "6", "--batch", "1", "--seq-len", "8", "--steps", "1", "--warmup", "0",
            "--only", "transformer", "--autotune-compare", "--child-timeout", "120", "--device-name", "cpu",
            "--out", str(tmp_path)]
    assert paper_scale.main(args) == 0
    rows, md = _rows(tmp_path, "paper_scale_autotune")
    assert [(r["row"], r["autotune"], r["status"]) for r in rows] == [("transformer", "quick", "ok"),
                                                                      ("transformer", "full", "ok")]
    assert float(rows[1]["tok_s_full_vs_quick"]) > 0 and "Baseline: the quick rows" in md


def test_paper_scale_full_autotune_gets_what_quick_left(tmp_path, monkeypatch):
    """Quick compiles in seconds: full autotune's child may use the rest of both modes' time, not only its half (on
    the H100 it did not finish within its half, 250 s)."""
    timeouts = []
    monkeypatch.setattr(paper_scale.subprocess, "run", lambda *a, timeout, **k: timeouts.append(timeout))
    args = ["--only", "transformer", "--autotune-compare", "--child-timeout", "100", "--device-name", "cpu",
            "--out", str(tmp_path)]
    assert paper_scale.main(args) == 0
    assert timeouts[0] == 100 and 195 < timeouts[1] <= 200
    rows, _ = _rows(tmp_path, "paper_scale_autotune")
    assert [r["status"] for r in rows] == ["not finished within 100 s (compile)", "not finished within 200 s (compile)"]


def test_paper_scale_autotune_at_a_recall_spaces_shape_passes_it_to_both_children_and_says_so(tmp_path, monkeypatch):
    """--autotune-compare with --recall-space: each child trains the space's recall model (its batch and length), and
    the table names that model, not the paper preset."""
    children = []
    monkeypatch.setattr(paper_scale.subprocess, "run", lambda cmd, **k: children.append(cmd))
    args = ["--recall-space", "search_spaces/paper_grid_h200_lr.yaml", "--mode", "graph", "--only", "gla:3:1@compile",
            "--autotune-compare", "--child-timeout", "100", "--device-name", "cpu", "--out", str(tmp_path)]
    assert paper_scale.main(args) == 0
    assert len(children) == 2 and all("--autotune-compare" not in c for c in children)
    assert all(c[c.index("--recall-space") + 1] == "search_spaces/paper_grid_h200_lr.yaml" for c in children)
    _, md = _rows(tmp_path, "paper_scale_autotune")
    assert "B=64, T=256, the recall model of search_spaces/paper_grid_h200_lr.yaml;" in md and "preset" not in md


# -- decode_memory -------------------------------------------------------------------------------------------------
DECODE = ["--mixers", "gla,gated_deltanet", "--ratios", "pure,3:1", "--preset", "proxy-tiny", "--layers", "6",
          "--lengths", "24,40", "--chunk", "16", "--decode", "2", "--device-name", "cpu"]


def test_decode_memory_equals_the_cost_model_on_cpu(tmp_path, monkeypatch):
    import hlnas.model.nn as hnn

    monkeypatch.setattr(hnn, "_TABLES", {})  # no table from an earlier test: the 40-token rows would grow one
    monkeypatch.setattr(hnn, "_RETIRED", [])
    assert decode_memory.main([*DECODE, "--out", str(tmp_path)]) == 0
    rows, md = _rows(tmp_path, "decode_memory")
    assert [(r["layout"], r["context"]) for r in rows][:2] == [("AAAAAA", "24"), ("AAAAAA", "40")]
    assert len(rows) == 10 and all(r["equal"] == "True" for r in rows)
    for r in rows:  # the bytes held: the cache tensors, summed, and their storages, against the cost model
        assert int(r["cache_tensors"]) == int(r["storage"]) == int(r["predicted"]) > 0
        assert int(r["seen_tokens"]) == int(r["context"])
        # RoPE's table was made to the longest context before the first row, so no row's decode grows it (on a GPU a
        # grown table lands in the allocator's count: 12 MiB on the all-attention 32k row before it was made first)
        assert r["rope_grown"] == "0" and int(r["rope_table"]) >= 2 * 4 * 40 * (64 // 4 // 2)
    pure = [r for r in rows if r["ratio"] == "pure"]
    assert all(r["predicted_kv"] == "0" and r["predicted_state"] == pure[0]["predicted_state"] for r in pure[:2])
    assert "10 of 10 rows equal" in md and "Baseline: the Transformer's bytes" in md
    for r in rows:  # the decode's MFU: the cost model's forward FLOPs per decoded token over the measured time
        cost = layout_cost(Layout.parse(r["layout"]), preset("proxy-tiny"), context=int(r["context"]), batch=1)
        want = cost.flops_per_token / (float(r["decode_ms_per_token"]) / 1e3) / PEAK_BF16
        assert float(r["mfu"]) == pytest.approx(want, rel=0.02) and want > 0


def test_decode_memory_reports_a_mismatch(tmp_path, monkeypatch):
    from hlnas.model import cost as budget

    real = budget.layout_cost

    def off_by_one(*a, **k):
        c = real(*a, **k)
        return budget.LayoutCost(**{**c.__dict__, "state_bytes": c.state_bytes + 1})

    monkeypatch.setattr(budget, "layout_cost", off_by_one)
    args = ["--mixers", "gla", "--ratios", "3:1", *DECODE[4:]]
    assert decode_memory.main([*args, "--out", str(tmp_path)]) == 1
    rows, _ = _rows(tmp_path, "decode_memory")
    assert [r["equal"] for r in rows] == ["False"] * 4


def test_held_bytes_counts_a_views_whole_storage():
    from hlnas.model.build import Cache

    cache = Cache(2)
    big = torch.zeros(10, 4)
    cache.layers[0]["k"] = big[-2:]  # a view: the cache keeps all of `big` alive
    cache.layers[1]["state"] = torch.zeros(3, dtype=torch.float64)
    cache.layers[1]["pos"] = 7
    assert decode_memory.held_bytes(cache) == (2 * 4 * 4 + 3 * 8, 10 * 4 * 4 + 3 * 8)


# -- trial_overhead ------------------------------------------------------------------------------------------------
def test_trial_overhead_cpu_smoke(tmp_path):
    args = ["--space", "tiny", "--layouts", "transformer", "--kinds", "lm,recall", "--modes", "warm",
            "--device-name", "cpu", "--out", str(tmp_path)]
    assert trial_overhead.main(args) == 0
    rows, md = _rows(tmp_path, "trial_overhead")
    assert [(r["kind"], r["mode"], r["status"], r["step_mode"]) for r in rows] == [
        ("lm", "warm", "ok", "eager"), ("recall", "warm", "ok", "eager")]
    for r in rows:
        assert 0 <= float(r["to_make_step_s"]) <= float(r["first_step_s"])
        assert float(r["first_opt_step_s"]) <= float(r["first_step_s"])
    assert "Baseline: the warm row" in md


def test_trial_overhead_cold_process(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    args = ["--space", "tiny", "--layouts", "hgrn:3:1", "--kinds", "lm", "--modes", "cold",
            "--device-name", "cpu", "--out", str(tmp_path)]
    assert trial_overhead.main(args) == 0
    (row,), _ = _rows(tmp_path, "trial_overhead")
    assert row["status"] == "ok" and float(row["process_s"]) > float(row["first_step_s"]) > 0


def test_trial_overhead_probe_leaves_hlnas_as_it_was():
    import hlnas.training.step
    import hlnas.lm.trainer

    before = hlnas.training.step.make_step, hlnas.lm.trainer.make_step
    with trial_overhead.first_step_probe({}):
        assert hlnas.training.step.make_step is not before[0]
    assert (hlnas.training.step.make_step, hlnas.lm.trainer.make_step) == before


def test_trial_overhead_names_why_a_step_ran_eagerly(monkeypatch):
    """A step that fell back to eager shows make_step's logged reason beside "eager" (a cold GLA recall trial on the
    H100 ran eagerly on 2026-12-05 and the table could not say why)."""
    import hlnas.search.trial
    import hlnas.training.step

    def fake_make_step(*a, **k):
        hlnas.training.step.log.warning("CUDA graph step not used: %s; running eagerly", "capture failed (X: y)")
        return (lambda: None), "eager"

    def fake_run_trial(spec):
        step, _ = hlnas.training.step.make_step()
        step()

    import hlnas.lm.trainer

    trainers = hlnas.lm.trainer.make_step
    monkeypatch.setattr(hlnas.training.step, "make_step", fake_make_step)
    monkeypatch.setattr(hlnas.search.trial, "run_trial", fake_run_trial)
    row = trial_overhead.one_trial(None)
    assert hlnas.lm.trainer.make_step is trainers  # the trainer's name for it is its own again, not the fake
    assert row["status"] == "ok"
    assert row["step_mode"] == "eager (CUDA graph step not used: capture failed (X: y); running eagerly)"


# -- on a GPU ------------------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_decode_memory_on_the_gpu_allocator(tmp_path):
    """What the CUDA caching allocator holds after a decode, less before, is the cost model's byte count."""
    args = ["--mixers", "gla,gated_deltanet,mamba2", "--ratios", "pure,3:1", "--preset", "proxy-tiny", "--layers", "6",
            "--lengths", "64,200", "--chunk", "64", "--decode", "3", "--device-name", "gpu", "--out", str(tmp_path)]
    assert decode_memory.main(args) == 0


# -- results -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("full,short", [("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H200", "h200"),
                                        ("NVIDIA A100-SXM4-80GB", "a100"), ("NVIDIA GeForce RTX 4090", "nvidia-geforce-rtx-4090")])
def test_files_are_named_by_the_card_that_measured_them(tmp_path, monkeypatch, full, short):
    from experiments.bench import results

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: full)
    assert results.card_name() == short
    stem = results.write_results(str(tmp_path), "x", None, "T", "cmd", "note", ["a"], lambda r: (r["a"],), [{"a": 1}],
                                 quiet=True)
    assert stem.name.startswith(f"x_{short}_") and f"# T, {short}," in stem.with_suffix(".md").read_text()


def test_without_cuda_the_card_is_cpu(monkeypatch):
    from experiments.bench import results

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert results.card_name() == "cpu"


def test_saved_memory_counts_less_for_the_lean_gated_norm(tmp_path):
    """saved_memory: per mixer a layer's saved GiB, composed and lean, from one run; the lean norm keeps less wherever
    a gated norm sits (Mamba-2, GLA) and the same where none does (the Transformer); the flags are restored."""
    import csv

    import hlnas.model.nn
    from experiments.bench import saved_memory

    assert saved_memory.main(["--mixers", "mamba2,gla,transformer", "--preset", "proxy-tiny", "--seq-len", "64",
                              "--out", str(tmp_path), "--device-name", "cpu"]) == 0
    (path,) = tmp_path.glob("saved_memory_t64_cpu_*.csv")
    rows = {r["mixer"]: r for r in csv.DictReader(open(path))}
    for m in ("mamba2", "gla"):
        assert 0 < int(rows[m]["lean_bytes"]) < int(rows[m]["composed_bytes"])
    assert int(rows["transformer"]["lean_bytes"]) == int(rows["transformer"]["composed_bytes"]) > 0
    assert hlnas.model.nn.LEAN_GATED_NORM and not hlnas.model.nn.FUSED_ON_CPU
