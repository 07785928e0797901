"""MQAR data layout (Zoology), seeds, and the accuracy metric."""

import itertools

import pytest
import torch
from torch import nn

from hlnas.model.config import preset
from hlnas.errors import ConfigError
from hlnas.model.layout import build_layout
from hlnas.model.build import build_model
from hlnas.recall.mqar import MqarTask, as_documents, make_mqar, mqar_accuracy, mqar_documents, mqar_loss, mqar_token_map
from hlnas.score.mqar_mixed import MqarMixedConfig, mqar_mixed_objective
from hlnas.score.objectives import MqarConfig, ScoreConfig, score
from hlnas.training.targets import split_targets

_CHUNK_ROWS = 1024  # mqar_documents draws instances in blocks of this many rows

CFG = MqarTask(vocab_size=256, seq_len=128, num_kv_pairs=8)


pytestmark = pytest.mark.usefixtures("one_thread")


def test_layout_keys_values_queries_and_labels():
    x, y = make_mqar(CFG, 64, seed=3)
    V, L, K = 256, 128, 8
    assert x.shape == y.shape == (64, L) and x.dtype == y.dtype == torch.long
    for row_x, row_y in zip(x, y):
        keys, values = row_x[0 : 2 * K : 2], row_x[1 : 2 * K : 2]
        assert ((keys >= 1) & (keys < V // 2)).all() and ((values >= V // 2) & (values < V)).all()
        assert len(set(keys.tolist())) == K and len(set(values.tolist())) == K
        region = row_x[2 * K :]
        qpos = region.nonzero().flatten()
        assert (qpos % 2 == 0).all(), "queries sit at even offsets of the query region"
        assert sorted(region[qpos].tolist()) == sorted(keys.tolist()), "each key is queried exactly once"
        # labels: the queried key's value at the query position, -100 elsewhere
        lab = (row_y != -100).nonzero().flatten()
        assert lab.tolist() == (qpos + 2 * K).tolist()
        pair = dict(zip(keys.tolist(), values.tolist()))
        assert all(int(row_y[p]) == pair[int(row_x[p])] for p in lab)
        assert (row_y[: 2 * K] == -100).all()


def test_gaps_follow_the_power_law():
    x, _ = make_mqar(MqarTask(vocab_size=256, seq_len=256, num_kv_pairs=4), 400, seed=0)
    slots = (256 - 8) // 2
    gaps = (x[:, 8:] != 0).nonzero()[:, 1] // 2
    early = (gaps < slots // 4).float().mean().item()
    # a = 0.01: P(g) ~ 1/(g+1)^0.99, so far more than a quarter of the queries land in the first quarter
    assert early > 0.5


def test_determinism_and_disjoint_train_test_streams():
    a = make_mqar(CFG, 16, seed=5)
    b = make_mqar(CFG, 16, seed=5)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(make_mqar(CFG, 16, seed=6)[0], a[0])
    train = make_mqar(CFG, 16, seed=5, split="train")[0]
    assert not torch.equal(train, a[0])
    train_rows = {tuple(r) for r in make_mqar(CFG, 200, seed=5, split="train")[0].tolist()}
    assert not train_rows & {tuple(r) for r in make_mqar(CFG, 200, seed=5, split="test")[0].tolist()}
    with pytest.raises(ConfigError, match="2\\*\\*31"):
        make_mqar(CFG, 1, seed=2**31)
    # past the 1024-row generation chunk: rows stay valid and are not repeats of the first chunk
    small = MqarTask(vocab_size=64, seq_len=16, num_kv_pairs=4)
    big_x, big_y = make_mqar(small, 1100, seed=0)
    assert torch.equal(big_x, make_mqar(small, 1100, seed=0)[0])
    assert ((big_y != -100).sum(1) == 4).all() and not torch.equal(big_x[1024:1100], big_x[:76])


def test_random_fillers_and_token_map():
    x, y = make_mqar(CFG.replace(random_non_queries=True), 8, seed=1)
    assert (x[:, 2 * 8 :] == 0).float().mean() < 0.05
    base_x, base_y = make_mqar(CFG, 8, seed=1)
    assert torch.equal(y, base_y)
    table = tuple(range(255, -1, -1))  # reversed ids
    mx, my = make_mqar(CFG.replace(token_map=table), 8, seed=1)
    assert torch.equal(mx, 255 - base_x)
    assert torch.equal(my == -100, base_y == -100)
    assert torch.equal(my[my != -100], 255 - base_y[base_y != -100])
    assert CFG.replace(token_map=tuple(range(1000, 1256))).model_vocab_needed == 1256


def test_config_errors():
    with pytest.raises(ConfigError, match="4K"):
        MqarTask(seq_len=16, num_kv_pairs=5)
    with pytest.raises(ConfigError, match="even"):
        MqarTask(seq_len=63, num_kv_pairs=4)
    with pytest.raises(ConfigError, match="distinct keys"):
        MqarTask(vocab_size=16, seq_len=64, num_kv_pairs=8)
    with pytest.raises(ConfigError, match="token_map"):
        MqarTask(vocab_size=16, seq_len=16, num_kv_pairs=2, token_map=(0,) * 16)


class Oracle(nn.Module):
    """Predicts, at each key position, the token after that key's first occurrence."""

    def __init__(self, vocab, wrong_first=False):
        super().__init__()
        self.vocab, self.wrong_first = vocab, wrong_first
        self.w = nn.Parameter(torch.zeros(()))

    def forward(self, x):
        B, L = x.shape
        same = x[:, :, None] == x[:, None, :]  # [B, t, p]
        earlier = torch.arange(L)[None, :] < torch.arange(L)[:, None]
        first = torch.where(same & earlier, torch.arange(L), L).min(-1).values  # first earlier occurrence
        nxt = torch.cat([x, torch.zeros(B, 1, dtype=x.dtype)], 1).gather(1, (first + 1).clamp(max=L))
        if self.wrong_first:  # wrong on the first query of each example
            q = ((first < L) & (x != 0)).float().argmax(1)  # the first repeated non-filler token
            nxt[torch.arange(B), q] = (nxt[torch.arange(B), q] + 1) % self.vocab
        return nn.functional.one_hot(nxt, self.vocab).float() + self.w


def test_accuracy_oracle_partial_and_random():
    x, y = make_mqar(CFG, 32, seed=0)
    assert mqar_accuracy(Oracle(256), x, y, batch_size=5) == 1.0
    assert mqar_accuracy(Oracle(256, wrong_first=True), x, y) == pytest.approx(1 - 1 / 8)
    torch.manual_seed(0)
    rand = nn.Sequential(nn.Embedding(256, 16), nn.Linear(16, 256))
    assert mqar_accuracy(rand, x, y) < 0.05
    assert mqar_loss(Oracle(256)(x) * 50, y) < 1e-3


def test_accuracy_is_per_example_then_mean():
    x = torch.zeros(2, 4, dtype=torch.long)
    y = torch.full((2, 4), -100)
    y[0, 1] = 0  # 1 label, right (the oracle-free model below predicts 0 everywhere)
    y[1, 0:3] = 5  # 3 labels, all wrong
    zero = nn.Sequential(nn.Embedding(8, 8), nn.Linear(8, 8))
    nn.init.zeros_(zero[1].weight)
    with torch.no_grad():
        zero[1].bias.copy_(torch.arange(8, 0, -1).float())  # argmax 0
    assert mqar_accuracy(zero, x, y) == pytest.approx(0.5)  # a pooled mean would give 0.25
    # examples without labels are left out; none at all is refused
    assert mqar_accuracy(zero, torch.cat([x, x[:1]]), torch.cat([y, torch.full((1, 4), -100)])) == pytest.approx(0.5)
    with pytest.raises(ConfigError, match="no labelled positions in labels; nothing to score"):
        mqar_accuracy(zero, x, torch.full((2, 4), -100))


def test_runs_inside_a_byte_level_hybrid_model():
    model = build_model(build_layout("transformer", None, 2), preset("proxy-tiny"))
    cfg = MqarTask(vocab_size=256, seq_len=64, num_kv_pairs=4)
    assert cfg.model_vocab_needed <= model.cfg.vocab_size
    x, y = make_mqar(cfg, 8, seed=0)
    acc = mqar_accuracy(model, x, y, batch_size=4)
    assert 0.0 <= acc <= 0.25
    with pytest.raises(ConfigError, match="vocabulary"):
        mqar_accuracy(model, x, torch.where(y == -100, y, y + 1000))


# ----- the recall protocol's MQAR format: instances mixed into LM training, the trained model scored on held-out ones

def test_document_form_puts_each_value_after_its_query():
    x, y = make_mqar(CFG, 16, seed=3)
    docs = as_documents(x, y)
    q = (y != -100).nonzero()
    assert torch.equal(docs[q[:, 0], q[:, 1] + 1], y[q[:, 0], q[:, 1]])  # next token after a query = its value
    untouched = torch.ones_like(x, dtype=torch.bool)
    untouched[q[:, 0], q[:, 1] + 1] = False
    assert torch.equal(docs[untouched], x[untouched]) and torch.equal(x[q[:, 0], q[:, 1] + 1], torch.zeros(len(q), dtype=torch.long))


def test_training_documents_are_token_mapped_and_never_a_test_instance():
    tmap = mqar_token_map(32, 256, eos_id=0)
    assert tmap == tuple(range(1, 33))  # eos keeps its meaning: no MQAR symbol maps to it
    assert mqar_token_map(4, 10, eos_id=2) == (0, 1, 3, 4)
    cfg = MqarTask(vocab_size=32, seq_len=32, num_kv_pairs=4, token_map=tmap)
    marked = list(itertools.islice(mqar_documents(cfg, seed=0), 2100))  # spans three generator blocks
    docs = [split_targets(torch.tensor([d]))[0][0].tolist() for d in marked]
    assert all(len(d) == 32 and 0 not in d and max(d) <= 32 for d in docs)
    assert len({tuple(d) for d in docs}) > 2000  # later blocks are new instances, not the first block again
    tx, ty = make_mqar(cfg, 256, seed=0, split="test")
    test = {tuple(r) for r in as_documents(tx, ty).tolist()}
    assert not test & {tuple(d) for d in docs}
    # only the answers are training targets: the token after each query, which is that key's value
    x, y = make_mqar(cfg, _CHUNK_ROWS, seed=0, split="train")
    first = torch.tensor(marked[:_CHUNK_ROWS])
    answers = torch.zeros_like(y, dtype=torch.bool)
    answers[:, 1:] = y[:, :-1] != -100
    assert torch.equal(first >= 0, answers) and int(answers.sum()) == _CHUNK_ROWS * 4
    assert torch.equal(split_targets(first)[0], as_documents(x, y))
    assert list(itertools.islice(mqar_documents(cfg, seed=0), 5)) == marked[:5]  # same seed, same documents
    with pytest.raises(ConfigError, match="needs a model vocabulary of at least 33"):
        mqar_token_map(32, 32, eos_id=0)


class Windowed(Oracle):
    """The oracle, but it only sees the last ``window`` tokens: a fixed-memory model."""

    def __init__(self, vocab, window):
        super().__init__(vocab)
        self.window = window

    def forward(self, x):
        out = torch.zeros(*x.shape, self.vocab)
        out[..., 0] = 1.0  # no recollection: predict token 0
        full = super().forward(x)
        L = x.shape[1]
        same = x[:, :, None] == x[:, None, :]
        t, p = torch.arange(L)[:, None], torch.arange(L)[None, :]
        seen = (same & (p < t) & (p >= t - self.window)).any(-1)  # the key is inside the window
        return torch.where(seen[..., None], full, out)


def test_mixed_objective_scores_the_document_form_at_each_length():
    tmap = mqar_token_map(64, 256, eos_id=0)
    trained_on = MqarTask(vocab_size=64, seq_len=64, num_kv_pairs=8, token_map=tmap)
    cfg = ScoreConfig(objectives=("mqar_mixed",), mqar=MqarConfig(test=64), mqar_mixed=MqarMixedConfig(scales=(1, 4)))
    out = mqar_mixed_objective(Oracle(256), trained_on, cfg, eos_id=0)
    assert out["mqar_mixed"]["by_length"] == {"64": 1.0, "256": 1.0} and out["mqar_mixed_acc"] == 1.0
    # a memory of 48 tokens recalls nearly everything at length 64 and loses the far queries at 256
    acc = mqar_mixed_objective(Windowed(256, 48), trained_on, cfg, eos_id=0)["mqar_mixed"]["by_length"]
    assert acc["64"] > 0.9 and acc["256"] < acc["64"] - 0.1


def test_mixed_objective_needs_mixed_training_and_whole_scales():
    model = build_model(build_layout("transformer", None, 2), preset("proxy-tiny"))
    from hlnas.data.tokenizer import load_tokenizer

    with pytest.raises(ConfigError, match="train.recall_format: mqar"):
        score(model, load_tokenizer("bytes"), ScoreConfig(objectives=("mqar_mixed",)))
    with pytest.raises(ConfigError, match=r"score.mqar_mixed.scales must be whole multiples .*, got \[1, 1.5\]"):
        MqarMixedConfig(scales=(1, 1.5))
    with pytest.raises(ConfigError, match="score.mqar_mixed.scales"):
        ScoreConfig.from_dict({"mqar_mixed": {"scales": []}})
