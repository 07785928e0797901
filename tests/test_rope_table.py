"""RoPE's cos/sin from a table made once (hlnas.model.nn.rope_table, HLNAS_ROPE_TABLE) against computing them in place: the
same values, bit for bit in eager mode, within float rounding under compile and under a CUDA graph; the table grows
without freeing what another stream may read; a capture never keeps a table it only recorded."""

from __future__ import annotations

import pytest
import torch

import hlnas.model.nn as nn_
from hlnas.model.nn import rope_table, rotary


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("offset", [0, 7, 300])
def test_the_table_gives_the_same_rotation_bit_for_bit(dtype, offset):
    x = torch.randn(2, 33, 3, 24, generator=torch.Generator().manual_seed(offset)).to(dtype)
    assert torch.equal(rotary(x, offset, 500.0, table=True), rotary(x, offset, 500.0, table=False))


def test_the_table_is_made_once_grows_by_doubling_and_keeps_the_old_one(monkeypatch):
    monkeypatch.setattr(nn_, "_TABLES", {})
    monkeypatch.setattr(nn_, "_RETIRED", [])
    cpu = torch.device("cpu")
    first = rope_table(cpu, 40, 8, 10000.0)
    assert first[0].shape == (40, 8) and rope_table(cpu, 16, 8, 10000.0) is first  # shorter: the same table
    grown = rope_table(cpu, 41, 8, 10000.0)
    assert grown[0].shape == (80, 8) and nn_._RETIRED == [first]
    assert torch.equal(grown[0][:40], first[0]) and torch.equal(grown[1][:40], first[1])
    assert rope_table(cpu, 41, 8, 500.0) is not grown and rope_table(cpu, 41, 4, 10000.0) is not grown  # own keys


def test_grow_rope_tables_covers_a_length_for_every_key_and_counts_its_bytes(monkeypatch):
    monkeypatch.setattr(nn_, "_TABLES", {})
    monkeypatch.setattr(nn_, "_RETIRED", [])
    cpu = torch.device("cpu")
    assert nn_.rope_tables_bytes() == 0
    a, b = rope_table(cpu, 10, 8, 10000.0), rope_table(cpu, 20, 4, 500.0)
    assert nn_.rope_tables_bytes() == 2 * 4 * (10 * 8 + 20 * 4)  # cos and sin, float32
    nn_.grow_rope_tables(100)
    big_a, big_b = rope_table(cpu, 100, 8, 10000.0), rope_table(cpu, 100, 4, 500.0)
    assert big_a[0].shape == (100, 8) and big_b[0].shape == (100, 4)
    assert nn_._RETIRED == [a, b] and len(nn_._TABLES) == 2  # no new key, each grown once
    assert nn_.rope_tables_bytes() == 2 * 4 * (10 * 8 + 20 * 4 + 100 * 8 + 100 * 4)
    nn_.grow_rope_tables(50)  # shorter: nothing changes
    assert rope_table(cpu, 100, 8, 10000.0) is big_a and len(nn_._RETIRED) == 2


def test_the_default_follows_rope_table(monkeypatch):
    made = []
    real = nn_.rope_table
    monkeypatch.setattr(nn_, "rope_table", lambda *a: made.append(a) or real(*a))
    x = torch.randn(1, 5, 1, 8)
    monkeypatch.setattr(nn_, "ROPE_TABLE", False)
    rotary(x, 0)
    assert made == []
    monkeypatch.setattr(nn_, "ROPE_TABLE", True)
    rotary(x, 2)
    assert made == [(x.device, 7, 4, 10000.0)]


def test_a_compiled_attention_layer_with_the_table_matches_eager(monkeypatch):
    """The table comes from outside the compiled graph (a graph break at rope_table): forward and gradients as in
    eager mode with the table computed in place."""
    from hlnas.model.mixers.attention import Attention

    torch.manual_seed(0)
    layer = Attention(32, Attention.Hparams(num_heads=2, num_kv_heads=2), 0)
    x = torch.randn(2, 16, 32, requires_grad=True)
    ref = layer(x)
    ref.square().sum().backward()
    want = [x.grad.clone(), *(p.grad.clone() for p in layer.parameters())]
    x.grad = None
    layer.zero_grad()
    monkeypatch.setattr(nn_, "ROPE_TABLE", True)
    out = torch.compile(layer, backend="aot_eager")(x)
    out.square().sum().backward()
    assert torch.allclose(out, ref, atol=1e-6)
    for got, w in zip([x.grad, *(p.grad for p in layer.parameters())], want):
        assert torch.allclose(got, w, atol=1e-5)


@pytest.mark.gpu
def test_a_table_first_made_inside_a_cuda_graph_capture_is_not_kept(monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    monkeypatch.setattr(nn_, "_TABLES", {})
    dev = torch.device("cuda")
    x = torch.randn(2, 64, 2, 32, device=dev)
    want = rotary(x, 0, table=False)
    graph, s = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        with torch.cuda.graph(graph):
            out = rotary(x, 0, table=True)
    torch.cuda.current_stream().wait_stream(s)
    assert nn_._TABLES == {}  # recorded into the graph only
    graph.replay()
    torch.cuda.synchronize()
    assert torch.allclose(out, want, atol=1e-6)
    kept = rope_table(dev, 64, 16, 10000.0)  # made outside a capture: kept, finished
    assert nn_._TABLES[(str(dev), 16, 10000.0)] is kept


@pytest.mark.parametrize("table", [False, True])
def test_rotary_qk_is_rotary_on_each_and_fetches_the_table_once(monkeypatch, table):
    made = []
    real = nn_.rope_table
    monkeypatch.setattr(nn_, "rope_table", lambda *a: made.append(a) or real(*a))
    q, k = torch.randn(2, 6, 4, 8), torch.randn(2, 6, 2, 8)  # grouped k heads: same length and head dim
    want = rotary(q, 3, table=False), rotary(k, 3, table=False)  # computed in place: no fetch
    rq, rk = nn_.rotary_qk(q, k, 3, table=table)
    assert torch.equal(rq, want[0]) and torch.equal(rk, want[1])
    assert made == ([(q.device, 9, 4, 10000.0)] if table else [])  # one fetch for q and k together


def test_rotary_qk_refuses_q_and_k_of_different_length():
    with pytest.raises(ValueError, match="differ in length or head dim"):
        nn_.rotary_qk(torch.randn(1, 4, 1, 8), torch.randn(1, 5, 1, 8), 0)
