"""Recall beyond the training setting (hlnas.recall.beyond): each setting corrected for its own no-recall baseline, a
model that does the lookup scores 1 everywhere and one that copies any value scores 0; and the key-count curriculum."""

import pytest
import torch
from torch import nn

from hlnas.errors import ConfigError
from hlnas.model.config import ModelConfig
from hlnas.model.layout import build_layout
from hlnas.recall.beyond import check_beyond, kv_at, score_beyond
from hlnas.recall.mqar import IGNORE, MqarTask
from hlnas.recall.proxy import MqarConfig, recall_setup, train_mqar

TASK = MqarTask(vocab_size=64, seq_len=32, num_kv_pairs=4)


class Lookup(nn.Module):
    """Reads MQAR the way a model that learned it would: at each position, the value that followed the last earlier
    occurrence of the current token (the key) in the pairs region; ``copy_any`` instead answers the first value."""

    def __init__(self, vocab: int, copy_any: bool = False):
        super().__init__()
        self.vocab, self.copy_any = vocab, copy_any
        self.dummy = nn.Parameter(torch.zeros(()))  # a device to report

    def forward(self, x):
        B, L = x.shape
        out = torch.full((B, L, self.vocab), -1e4)
        for b in range(B):
            row = x[b].tolist()
            values = {}
            for i in range(0, L - 1, 2):  # pairs sit at even/odd positions until the queries start
                if row[i] == 0 or row[i] >= self.vocab // 2 or row[i + 1] < self.vocab // 2:
                    break
                values[row[i]] = row[i + 1]
            first = next(iter(values.values()))
            for i, tok in enumerate(row):
                out[b, i, first if self.copy_any else values.get(tok, first)] = 0.0
        return out


def test_a_model_that_looks_up_scores_one_at_every_setting_and_copying_scores_zero():
    settings = ((64, 4), (64, 8), (128, 16))
    good = score_beyond(Lookup(64), TASK, settings, n=16, seed=0, batch=8, device="cpu")
    assert good["mqar_beyond"] == 1.0
    assert set(good["mqar_beyond_settings"]) == {"L64K4", "L64K8", "L128K16"}
    for s in good["mqar_beyond_settings"].values():  # each beside its own baseline: copy-any at 1/K
        assert s["raw"] == 1.0 and s["corrected"] == 1.0 and 0 < s["baseline"] < 0.5
    bad = score_beyond(Lookup(64, copy_any=True), TASK, settings, n=16, seed=0, batch=8, device="cpu")
    assert bad["mqar_beyond"] < 0.1  # at its baselines: no recall
    assert {k: round(v["baseline"], 3) for k, v in bad["mqar_beyond_settings"].items()} == \
           {k: round(v["baseline"], 3) for k, v in good["mqar_beyond_settings"].items()}


def test_the_curriculum_doubles_the_pairs_to_the_target_by_its_fraction_of_the_steps():
    got = [kv_at(s, start=8, target=64, steps=1000, frac=0.25) for s in range(0, 1000, 50)]
    assert got[0] == 8 and got[-1] == 64 and got == sorted(got)
    assert set(got) == {8, 16, 32, 64} and kv_at(250, start=8, target=64, steps=1000, frac=0.25) == 64
    assert kv_at(0, start=64, target=64, steps=1000, frac=0.25) == 64  # no curriculum: the target throughout


def test_curriculum_batches_hold_fewer_pairs_first_in_the_same_shape():
    cfg = MqarConfig(seq_len=32, kv_pairs=8, vocab=64, batch=4, steps=256, curriculum_kv=2, curriculum_frac=0.5)
    setup = recall_setup(build_layout("hgrn", "3:1", 3), ModelConfig(d_model=16, n_heads=2, vocab_size=64), cfg)
    batches = setup.train_batches(seed=0)
    first = [next(batches) for _ in range(200)]
    queries = [int((y != IGNORE).sum(1).float().mean()) for _, y in first[::64]]
    assert queries[0] == 2 and queries[-1] == 8 and all(x.shape == (4, 32) for x, _ in first)


@pytest.mark.parametrize("bad, says", [
    ({"beyond": [[64]]}, "score.mqar.beyond[0]=[64] is not allowed; allowed: [seq_len, kv_pairs]"),
    ({"beyond": [[64, 40]]}, "score.mqar.beyond[0]=[64, 40]: MqarTask.num_kv_pairs must satisfy"),
    ({"beyond": [[64, 4], [64, 4]]}, "lists a setting twice"),
    ({"curriculum_kv": 9}, "score.mqar.curriculum_kv=9 is not allowed; allowed: null or an integer from 1 to kv_pairs=4"),
    ({"curriculum_frac": 1.5}, "score.mqar.curriculum_frac=1.5 is not allowed"),
    ({"beyond": [[64, 4]], "task": "vt"}, "are MQAR settings; task is 'vt'"),
])
def test_bad_beyond_and_curriculum_settings_are_one_line_errors(bad, says):
    with pytest.raises(ConfigError, match=None) as e:
        MqarConfig(seq_len=32, kv_pairs=4, vocab=64, **bad)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_a_trained_recall_model_reports_recall_beyond_beside_its_baselines(one_thread):
    cfg = MqarConfig(seq_len=32, kv_pairs=4, vocab=64, batch=8, steps=20, eval_every=10, test=16, val=16,
                     beyond=((64, 4),), curriculum_kv=2)
    r = train_mqar(build_layout("hgrn", "3:1", 3), ModelConfig(d_model=16, n_heads=2, vocab_size=64), cfg, seed=0,
                   device="cpu")
    s = r["mqar_beyond_settings"]["L64K4"]
    assert 0 <= r["mqar_beyond"] == s["corrected"] <= 1 and s["baseline"] == pytest.approx(0.25, abs=0.05)
    assert r["mqar"]["beyond"] == [[64, 4]] and r["mqar"]["curriculum"] == {"kv_start": 2, "frac": 0.25}
    assert check_beyond([[64, 4]], 64, 32) == ((64, 4),)


def test_the_kernel_path_is_a_protocol_setting_and_each_result_says_what_its_ops_ran_on(one_thread):
    with pytest.raises(ConfigError, match="score.mqar.kernels='triton' is not allowed; allowed: auto"):
        MqarConfig(kernels="triton")
    cfg = MqarConfig(seq_len=32, kv_pairs=4, vocab=64, batch=8, steps=4, eval_every=2, test=8, val=8, kernels="torch")
    r = train_mqar(build_layout("hgrn2", "3:1", 3), ModelConfig(d_model=16, n_heads=2, vocab_size=64), cfg, seed=0,
                   device="cpu")
    assert r["mqar"]["kernels"] == "torch" and r["mqar"]["kernel_paths"]["gla"] == "torch"  # HGRN-2 runs on the GLA op
