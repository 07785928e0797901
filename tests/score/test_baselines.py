"""No-recall baselines: exact values on MQAR instances, the corrected recall, RULER's copy-a-shape guess."""

from __future__ import annotations

import math

import pytest
import torch

from hlnas.data.tokenizer import load_tokenizer
from hlnas.recall.baselines import corrected, mqar_baselines, ruler_sample_baseline, strongest
from hlnas.recall.mqar import IGNORE, MqarTask, as_documents, make_mqar, mqar_accuracy, mqar_token_map
from hlnas.recall.ruler import generate_samples
from hlnas.score.ruler import score_sample


@pytest.mark.parametrize("K", [1, 4, 8, 32])
def test_zoology_form_copy_any_is_one_over_k(K):
    cfg = MqarTask(vocab_size=256, seq_len=max(4 * K, 16), num_kv_pairs=K)
    x, y = make_mqar(cfg, 64, 3, split="test")
    b = mqar_baselines(x, y, cfg.vocab_size)
    assert set(b) == {"uniform", "copy_any"}  # nothing is revealed in Zoology's form
    assert b["copy_any"] == pytest.approx(1 / K) and b["uniform"] == pytest.approx(1 / 128)
    assert strongest(b) == ("copy_any", pytest.approx(1 / K))


def test_document_form_eliminating_revealed_values_is_h_k_over_k():
    """Each query followed by its answer: a guess among values not yet revealed scores H_K / K (the 0.340 of
    reference/recall-and-speed-2026-12-01.md at K=8 is this plus the longer lengths' extra pairs)."""
    K = 8
    cfg = MqarTask(vocab_size=64, seq_len=64, num_kv_pairs=K)
    x, y = make_mqar(cfg, 128, 0, split="test")
    b = mqar_baselines(as_documents(x, y), y, cfg.vocab_size, document_form=True)
    harmonic = sum(1 / i for i in range(1, K + 1))
    assert b["eliminate_revealed"] == pytest.approx(harmonic / K) and b["copy_any"] == pytest.approx(1 / K)
    assert strongest(b)[0] == "eliminate_revealed"


def test_the_h200_grid_protocol_baseline_is_0_340():
    """The number the first H200 grid was below: its test instances (K=8, 64 symbols, L = 64, 128, 256, mapped
    into the byte vocabulary after a separator), mean over the three lengths."""
    from hlnas.score.mqar_mixed import MqarMixedConfig, mixed_baselines
    from hlnas.score.objectives import MqarConfig, ScoreConfig

    tok = load_tokenizer("bytes")
    trained = MqarTask(vocab_size=64, seq_len=64, num_kv_pairs=8, token_map=mqar_token_map(64, tok.vocab_size, tok.eos_id))
    base = mixed_baselines(trained, ScoreConfig(mqar_mixed=MqarMixedConfig(scales=(1, 2, 4)), mqar=MqarConfig(test=512)), tok.eos_id)
    assert base["mean"]["eliminate_revealed"] == pytest.approx(0.340, abs=5e-4)
    assert base["mean"]["copy_any"] == pytest.approx(0.125)


def test_a_model_that_copies_a_random_context_value_scores_the_baseline():
    """The baseline is what a real no-association strategy scores under mqar_accuracy, not a formula apart."""
    K, V = 4, 32
    cfg = MqarTask(vocab_size=V, seq_len=32, num_kv_pairs=K)
    x, y = make_mqar(cfg, 2000, 1, split="test")

    class CopyAny(torch.nn.Module):
        def forward(self, ids):
            g = torch.Generator().manual_seed(0)
            logits = torch.zeros(*ids.shape, V)
            values = ids[:, 1 : 2 * K : 2]  # the K values of each instance
            pick = values.gather(1, torch.randint(K, (ids.shape[0], ids.shape[1]), generator=g))
            return logits.scatter_(2, pick[..., None], 1.0)

        def parameters(self):
            return iter([torch.zeros(1)])

    acc = mqar_accuracy(CopyAny(), x, y)
    assert acc == pytest.approx(mqar_baselines(x, y, V)["copy_any"], abs=0.02)


def test_random_fillers_before_a_query_widen_copy_any():
    cfg = MqarTask(vocab_size=32, seq_len=64, num_kv_pairs=4, random_non_queries=True)
    x, y = make_mqar(cfg, 64, 0, split="test")
    assert mqar_baselines(x, y, 32)["copy_any"] < 1 / 4  # filler value symbols are candidates too


def test_token_mapped_instances_give_the_same_baselines():
    tok = load_tokenizer("bytes")
    plain = MqarTask(vocab_size=64, seq_len=64, num_kv_pairs=8)
    mapped = plain.replace(token_map=mqar_token_map(64, tok.vocab_size, tok.eos_id))
    a = mqar_baselines(*make_mqar(plain, 32, 5), 64)
    b = mqar_baselines(*make_mqar(mapped, 32, 5), 64, mapped.token_map)
    assert a == pytest.approx(b)


def test_instances_without_queries_are_left_out_and_all_empty_refused():
    cfg = MqarTask(vocab_size=32, seq_len=32, num_kv_pairs=4)
    x, y = make_mqar(cfg, 8, 0)
    y2 = y.clone()
    y2[0] = IGNORE
    assert mqar_baselines(x, y2, 32)["copy_any"] == pytest.approx(0.25)
    with pytest.raises(ValueError, match="no labelled positions"):
        mqar_baselines(x, torch.full_like(y, IGNORE), 32)


@pytest.mark.parametrize(("acc", "b", "want"), [(0.25, 0.25, 0.0), (0.1, 0.25, 0.0), (1.0, 0.25, 1.0), (0.625, 0.25, 0.5),
                                                (0.5, 1.0, 0.0), (0.3, 0.0, 0.3)])
def test_corrected_recall(acc, b, want):
    assert corrected(acc, b) == pytest.approx(want)


def test_corrected_recall_of_nan_is_nan():
    assert math.isnan(corrected(float("nan"), 0.2))


@pytest.mark.parametrize("task", ["niah_single_1", "niah_multikey_2", "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe"])
def test_ruler_guess_baseline_is_what_copying_candidates_scores(task):
    """Copying the answers' shape from the context: a guess that outputs every candidate scores 1 (it is in
    the candidate set), and the baseline is between 0 and 1; the answer itself is always a candidate."""
    tok = load_tokenizer("bytes")
    for s in generate_samples(task, tok, 2048, 3, 0):
        b = ruler_sample_baseline(task, s.prompt, s.answers)
        assert 0 < b <= 1, (task, b)
        # with a single answer among n candidates the guess finds it with probability 1/n
        assert score_sample(task, " ".join(s.answers), s.answers) == 1.0


def test_ruler_niah_single_baseline_counts_the_distractors():
    tok = load_tokenizer("bytes")
    s = generate_samples("niah_multikey_1", tok, 2048, 1, 0)[0]  # one needle among distractor needles
    import re

    numbers = set(re.findall(r"(?<!\d)\d{7}(?!\d)", s.prompt))
    assert ruler_sample_baseline("niah_multikey_1", s.prompt, s.answers) == pytest.approx(1 / len(numbers))
    assert ruler_sample_baseline("qa_1", s.prompt, s.answers) == 0.0
