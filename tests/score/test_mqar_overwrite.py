"""MQAR with overwritten keys (``score.mqar.overwrite``): R of the K keys are assigned a second value before the
queries, which ask for the latest. A model that keeps the latest value scores 1, one that keeps the first value scores
the share of keys never re-assigned, and the no-recall baselines count the re-assigned keys."""

import pytest
import torch
from torch import nn

from hlnas.errors import ConfigError
from hlnas.model.config import ModelConfig
from hlnas.model.layout import build_layout
from hlnas.recall.baselines import corrected, mqar_baselines, strongest
from hlnas.recall.mqar import IGNORE, MqarTask, hits_accuracy, label_hits, make_mqar
from hlnas.recall.proxy import MqarConfig, train_mqar

V, L, K = 64, 64, 10
TASK = MqarTask(vocab_size=V, seq_len=L, num_kv_pairs=K, overwrite=0.4)  # R = 4


class Recall(nn.Module):
    """Answers each query with the latest value its key was assigned (``first=True``: the first, as a memory that
    cannot replace a key's value would)."""

    def __init__(self, first: bool = False):
        super().__init__()
        self.first = first
        self.dummy = nn.Parameter(torch.zeros(()))

    def forward(self, x):
        B, T = x.shape
        out = torch.full((B, T, V), -1e4)
        for b in range(B):
            row, values = x[b].tolist(), {}
            for i in range(0, T - 1, 2):
                if not (0 < row[i] < V // 2 and row[i + 1] >= V // 2):
                    break
                if not (self.first and row[i] in values):
                    values[row[i]] = row[i + 1]
            for i, tok in enumerate(row):
                out[b, i, values.get(tok, V - 1)] = 0.0
        return out


def _latest(row: list[int], end: int) -> dict[int, int]:
    current = {}
    for p in range(0, end - 1, 2):
        current[row[p]] = row[p + 1]
    return current


def test_r_keys_are_assigned_twice_and_every_query_asks_for_the_latest_value():
    x, y = make_mqar(TASK, 32, 0)
    R = TASK.overwritten
    assert R == 4
    for b in range(32):
        row = x[b].tolist()
        queries = (y[b] != IGNORE).nonzero().flatten().tolist()
        assert len(queries) == K and queries[0] >= 2 * (K + R)  # each key once, after every assignment
        keys = row[0 : 2 * (K + R) : 2]
        values = row[1 : 2 * (K + R) : 2]
        assert len(set(keys)) == K and len(set(values)) == K + R  # R keys again, every value new
        latest = _latest(row, 2 * (K + R))
        assert all(int(y[b, q]) == latest[row[q]] for q in queries)
        assert sum(latest[row[q]] != row[row.index(row[q]) + 1] for q in queries) == R


def test_the_first_assignments_are_the_instances_without_overwrite():
    plain, _ = make_mqar(TASK.replace(overwrite=0.0), 16, 3)
    over, _ = make_mqar(TASK, 16, 3)
    assert torch.equal(plain[:, : 2 * K], over[:, : 2 * K])


def test_latest_wins_first_loses_the_overwritten_share_and_copying_scores_its_baseline():
    x, y = make_mqar(TASK, 24, 1)
    base = mqar_baselines(x, y, V)
    R = TASK.overwritten
    # the strongest no-recall strategy knows which keys were re-assigned: 1/R on those, 1/(K - R) on the rest
    assert base["latest_by_repeat"] == pytest.approx(2 / K)
    assert base["copy_any"] == pytest.approx(1 / (K + R))
    _, b = strongest(base)
    latest = hits_accuracy(label_hits(Recall(), x, y, batch_size=8), y)
    first = hits_accuracy(label_hits(Recall(first=True), x, y, batch_size=8), y)
    assert latest == 1.0 and corrected(latest, b) == 1.0
    assert first == pytest.approx((K - R) / K) and corrected(first, b) < 0.6 * corrected(latest, b)


def test_plain_mqar_reports_no_overwrite_baseline():
    x, y = make_mqar(TASK.replace(overwrite=0.0), 8, 0)
    assert "latest_by_repeat" not in mqar_baselines(x, y, V)


@pytest.mark.parametrize("bad, says", [
    ({"overwrite": 1.0}, "MqarTask.overwrite must be a fraction in [0, 1)"),
    ({"overwrite": -0.1}, "MqarTask.overwrite must be a fraction in [0, 1)"),
    ({"kv_pairs": 8, "overwrite": 0.5}, "needs seq_len >= 4K + 2R = 40, got 32"),
    ({"overwrite": 0.5, "task": "vt"}, "are MQAR settings; task is 'vt'"),
    ({"overwrite": 0.5, "beyond": [[32, 8]]}, "score.mqar.beyond[0]=[32, 8]: MqarTask with num_kv_pairs=8"),
])
def test_bad_overwrite_settings_are_one_line_errors(bad, says):
    with pytest.raises(ConfigError) as e:
        MqarConfig(**{"seq_len": 32, "kv_pairs": 4, "vocab": 64, **bad})
    assert says in str(e.value) and "\n" not in str(e.value)


def test_a_recall_run_on_overwritten_keys_records_them_beside_its_baseline(one_thread):
    cfg = MqarConfig(seq_len=32, kv_pairs=4, vocab=64, batch=8, steps=6, eval_every=3, test=16, val=16, overwrite=0.5)
    r = train_mqar(build_layout("hgrn", "3:1", 3), ModelConfig(d_model=16, n_heads=2, vocab_size=64), cfg, seed=0,
                   device="cpu")
    assert r["mqar"]["overwrite"] == 0.5 and r["mqar"]["overwritten"] == 2
    assert r["mqar_baseline"] == pytest.approx(0.5)  # latest_by_repeat: 1/R on 2 keys, 1/(K - R) on 2
