"""hlnas.training.step.compiled compiles a model block by block (RegionalCompiled): blocks of one mixer share one
compiled graph, the outputs and gradients are the eager model's, and the model's own call stays eager. A counting backend stands in for inductor (a CPU inductor compile
costs 10+ s); experiments/bench/compile_regions.py measures the real one."""

import pytest
import torch

from hlnas.model.config import ModelConfig
from hlnas.errors import ConfigError
from hlnas.model.layout import Layout
from hlnas.model.build import seeded_model
from hlnas.training.step import RegionalCompiled, compiled

CFG = ModelConfig(d_model=32, n_layers=6, vocab_size=64, n_heads=2, mlp_hidden=64,
                  mixer_hparams={"attention": {"input_conv": 4, "input_conv_init": "shift"}})


class Counting:
    """A torch.compile backend that runs the traced graph as it is and counts the graphs it was given and their nodes
    (the work a real backend would compile)."""

    def __init__(self):
        self.graphs = self.nodes = 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        self.nodes += len(gm.graph.nodes)
        return gm.forward


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def traced(layout: str, whole: bool = False) -> tuple[int, int]:
    """(graphs, nodes) the backend was given for one forward of ``layout``'s model, compiled block by block or whole."""
    torch._dynamo.reset()
    backend, model = Counting(), seeded_model(Layout.parse(layout), CFG, 0)
    (torch.compile(model, backend=backend) if whole else compiled(model, backend, "k"))(torch.randint(0, 64, (2, 16)))
    return backend.graphs, backend.nodes


# HGRN and HGRN-2 from one layer: each layer's forget-gate floor differs, and held as a Python float it made dynamo
# recompile the block at the second layer; held as a buffer every layer shares the graph
@pytest.mark.parametrize("short, deep", [("AA", "AAAAAA"), ("RR", "RRRRRR"), ("GGA", "GGAGGAGGA"), ("H", "HHHH"),
                                         ("N", "NNNN")])
def test_blocks_of_one_mixer_share_compiled_graphs_whatever_the_depth(short, deep):
    """Compiled whole, a deeper model is a longer graph to trace and compile (the 24-layer recall model's first step
    took 49 s on the CPU); block by block, three times the layers compile no more graphs and no more nodes."""
    assert traced(deep) == traced(short) and traced(short)[0] >= 1
    if traced(short, whole=True)[0] == 1:  # what it saves: whole, one graph as long as the model
        assert traced(deep, whole=True)[1] > 2 * traced(short, whole=True)[1]
    # (GLA's PyTorch kernel breaks every GLA block's graph, so compiled whole its blocks already came apart)


def test_the_regional_model_is_the_eager_model_in_outputs_and_gradients():
    model, ref = (seeded_model(Layout.parse("GGAGGA"), CFG, 0) for _ in range(2))
    backend = Counting()
    step_model = compiled(model, backend, "score.mqar.compile")
    assert isinstance(step_model, RegionalCompiled) and list(step_model.parameters()) == list(model.parameters())
    x = torch.randint(0, 64, (2, 16))
    out, want = step_model(x), ref(x)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
    out.square().mean().backward()
    want.square().mean().backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6, msg=name)
    before = backend.graphs
    model(x)  # the model's own call (evaluation) is not compiled
    assert backend.graphs == before >= 1


def test_a_model_without_blocks_compiles_whole_and_a_bad_backend_is_named():
    lin = torch.nn.Linear(4, 4)
    backend = Counting()
    whole = compiled(lin, backend, "train.compile")
    assert not isinstance(whole, RegionalCompiled)
    whole(torch.randn(2, 4))
    assert backend.graphs == 1
    with pytest.raises(ConfigError, match=r"train.compile='nope'.*Allowed: true, false or one of"):
        compiled(seeded_model(Layout.parse("AA"), CFG, 0), "nope", "train.compile")


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["AAAA", "GZAH"])
def test_a_recall_run_compiled_block_by_block_in_the_cuda_graph_follows_the_uncompiled_one(layout):
    """On CUDA (bf16 autocast, fla kernels inside the compiled blocks, the whole step captured): a recall run with
    score.mqar.compile (inductor, block by block) and one without, same seed and data, stop at the same steps with
    the same curve within bf16 tolerance."""
    from hlnas.recall.mqar import MqarTask, make_mqar
    from hlnas.recall.proxy import MqarConfig, _one_rate, recall_setup

    base = ModelConfig(d_model=64, n_layers=4, vocab_size=64, n_heads=2)
    hp = {"attention": {"input_conv": 4, "input_conv_init": "shift"}, "hgrn": {"use_short_conv": True}}
    kw = dict(seq_len=64, kv_pairs=4, vocab=64, batch=16, steps=40, eval_every=10, val=64, test=64,
              model={"residual_init": "zero", "mixer_hparams": hp})
    plain, comp = MqarConfig(**kw), MqarConfig(**kw, compile=True)
    mcfg = MqarTask(vocab_size=plain.vocab, seq_len=plain.seq_len, num_kv_pairs=plain.kv_pairs)
    val = make_mqar(mcfg, plain.val, 2**31 - 2, split="train")
    a = _one_rate(recall_setup(Layout.parse(layout), base, plain), 1e-3, 1, torch.device("cuda"), val)
    b = _one_rate(recall_setup(Layout.parse(layout), base, comp), 1e-3, 1, torch.device("cuda"), val)
    for got in (b,):
        assert got["mode"] == a["mode"] == "graph" and got["steps"] == a["steps"]
        assert [c[2] for c in got["curve"]] == pytest.approx([c[2] for c in a["curve"]], rel=0.02)
        assert [c[1] for c in got["curve"]] == pytest.approx([c[1] for c in a["curve"]], abs=0.05)


def test_hlnas_compiles_hand_fla_kernels_python_floats_as_fp32(monkeypatch):
    """Inductor types a Python float argument of a user-defined Triton kernel (fla's ``scale``) as fp64 unless told
    otherwise, and Triton then refuses fla's loop-carried fp32 state (H200, 2026-12-03); every hlnas compile passes
    INDUCTOR_OPTIONS, under which inductor's signature types it fp32, as Triton's own launcher does."""
    from torch._inductor import config
    from torch._inductor.codegen.common import SizeArg
    from torch._inductor.codegen.triton_utils import signature_of

    from hlnas.training import step

    assert step.INDUCTOR_OPTIONS, "this torch no longer has the flag: find what replaced it"
    with config.patch(step.INDUCTOR_OPTIONS):
        assert signature_of(SizeArg("scale", 0.125), size_dtype=None) == "fp32"
    seen = []
    real = torch.compile
    monkeypatch.setattr(torch, "compile", lambda m, **kw: seen.append(kw) or real(m, **kw))
    model = seeded_model(Layout.parse("AG"), CFG, 0)
    compiled(model, True, "score.mqar.compile")
    compiled(model, Counting(), "score.mqar.compile")
    assert seen and all(kw["options"] == step.INDUCTOR_OPTIONS for kw in seen if kw["backend"] == "inductor")
    assert any(kw["backend"] == "inductor" for kw in seen) and any(kw["options"] is None for kw in seen)



