"""Packing: shapes, determinism, resume by start_step, train/val disjointness, mixing, errors."""

from __future__ import annotations

import itertools
import json
import re

import pytest
import torch

from hlnas.data.corpus import synthetic_document
from hlnas.data.packing import TokenStream, tokens_per_batch
from hlnas.training.targets import not_a_target, split_targets
from hlnas.data.sources import DataConfig, DataSourceError
from hlnas.errors import ConfigError


def take(it, n):
    return list(itertools.islice(it, n))


def same(a, b):
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.fixture
def numbered(tmp_path):
    """A finite jsonl source of 30 documents of varied length, each tagged with its id <dNN>."""
    f = tmp_path / "docs.jsonl"
    f.write_text("".join(json.dumps({"text": f"<d{i:02d}> " + "word " * (3 + 7 * i % 23)}) + "\n" for i in range(30)))
    return f


def test_shapes_dtype_and_tokens_per_batch():
    ts = TokenStream(DataConfig(val_docs=8), seq_len=32)
    b = next(ts.train_batches(3))
    assert b.shape == (3, 33) and b.dtype == torch.long
    assert 0 <= int(b.min()) and int(b.max()) < ts.vocab_size
    val = ts.val_batches(4, max_batches=2)
    assert len(val) == 2 and all(v.shape == (4, 33) for v in val)
    assert tokens_per_batch(3, 32) == 96 == ts.tokens_per_batch(3)
    # Fewer validation rows than one batch: one smaller batch holding all of them, not an error.
    small = ts.val_batches(100_000)
    assert len(small) == 1 and small[0].shape == (len(ts.val_rows()), 33)


def test_rows_are_consecutive_slices_of_documents_joined_by_eos(numbered):
    ts = TokenStream(DataConfig(source=str(numbered), val_docs=4), seq_len=15)
    flat = []
    for line in numbered.read_text().splitlines()[4:]:
        flat += ts.tokenizer.encode(json.loads(line)["text"]) + [ts.eos_id]
    n_rows = len(flat) // 16
    rows = torch.cat(take(ts.train_batches(2), n_rows // 2))
    assert rows.flatten().tolist() == flat[: rows.numel()]


def test_same_seed_same_batches_different_seed_different():
    a = take(TokenStream(DataConfig(seed=1, val_docs=4), 64).train_batches(4), 3)
    b = take(TokenStream(DataConfig(seed=1, val_docs=4), 64).train_batches(4), 3)
    c = take(TokenStream(DataConfig(seed=2, val_docs=4), 64).train_batches(4), 3)
    assert same(a, b) and not same(a, c)
    va = TokenStream(DataConfig(seed=1, val_docs=4), 64).val_batches(2)
    assert same(va, TokenStream(DataConfig(seed=1, val_docs=4), 64).val_batches(2))


def test_shuffle_seed_permutes_rows_of_a_file_source(numbered):
    plain = take(TokenStream(DataConfig(source=str(numbered), val_docs=2), 7).train_batches(6), 1)[0]
    s1 = take(TokenStream(DataConfig(source=str(numbered), val_docs=2, shuffle_rows=6, seed=1), 7).train_batches(6), 1)[0]
    s2 = take(TokenStream(DataConfig(source=str(numbered), val_docs=2, shuffle_rows=6, seed=2), 7).train_batches(6), 1)[0]
    # Same rows (one block of 6), in a seed-dependent order.
    key = lambda t: sorted(map(tuple, t.tolist()))  # noqa: E731
    assert key(plain) == key(s1) == key(s2)
    assert not torch.equal(s1, s2) and not torch.equal(plain, s1)


@pytest.mark.parametrize("shuffle_rows", [0, 5])
def test_resume_by_start_step_equals_skipping(numbered, shuffle_rows):
    # The finite source spans several passes here, so skips also cross pass boundaries.
    cfg = DataConfig(source=str(numbered), val_docs=3, shuffle_rows=shuffle_rows)
    full = take(TokenStream(cfg, 9).train_batches(3), 60)
    for start in (1, 2, 7, 31, 55):
        assert same(take(TokenStream(cfg, 9).train_batches(3, start_step=start), 5), full[start:start + 5]), start


@pytest.mark.parametrize("shuffle_rows", [0, 16])
def test_resume_on_the_synthetic_corpus(shuffle_rows):
    cfg = DataConfig(seed=7, val_docs=2, shuffle_rows=shuffle_rows)
    full = take(TokenStream(cfg, 64).train_batches(4), 40)
    assert same(take(TokenStream(cfg, 64).train_batches(4, start_step=37), 3), full[37:40])


def test_resume_with_a_subword_tokenizer(tmp_path, numbered):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[EOS]": 0, "[UNK]": 1, "word": 2} | {f"d{i:02d}": 3 + i for i in range(30)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="[EOS]", unk_token="[UNK]").save_pretrained(tmp_path / "tok")
    cfg = DataConfig(source=str(numbered), tokenizer=str(tmp_path / "tok"), val_docs=3)
    ts = TokenStream(cfg, 5)
    assert ts.vocab_size == 33 and ts.eos_id == 0
    full = take(ts.train_batches(2), 30)
    assert int(torch.cat(full).max()) < 33 and (torch.cat(full) == 0).any()
    assert same(take(ts.train_batches(2, start_step=17), 5), full[17:22])


def test_train_and_val_never_share_a_document(numbered):
    cfg = DataConfig(source=str(numbered), val_docs=6)
    ts = TokenStream(cfg, 11)
    decode = ts.tokenizer.decode
    val_text = "".join(decode(r) for r in ts.val_rows())
    train_text = "".join(decode(b.flatten().tolist()) for b in take(ts.train_batches(4), 40))  # > 2 passes
    val_ids, train_ids = set(re.findall(r"<d(\d\d)>", val_text)), set(re.findall(r"<d(\d\d)>", train_text))
    assert val_ids <= {f"{i:02d}" for i in range(6)} and len(val_ids) >= 4  # the last may be cut off
    assert train_ids == {f"{i:02d}" for i in range(6, 30)}


def test_a_finite_source_repeats_in_passes(numbered):
    ts = TokenStream(DataConfig(source=str(numbered), val_docs=6), 11)
    batches = take(ts.train_batches(4), 150)
    assert len(batches) == 150  # about three passes over the 24 training documents
    ids = re.findall(r"<d(\d\d)>", ts.tokenizer.decode(torch.cat(batches).flatten().tolist()))
    one_pass = [f"{i:02d}" for i in range(6, 30)]
    assert len(ids) > 60 and ids[:60] == (one_pass * 3)[:60]


def test_synthetic_val_documents_never_appear_in_training():
    ts = TokenStream(DataConfig(seed=3, val_docs=5), 127)
    val = ts.val_documents()
    assert val == [synthetic_document(3, i) for i in range(5)]
    assert take(ts.train_documents(), 2) == [synthetic_document(3, 5), synthetic_document(3, 6)]
    train_text = ts.tokenizer.decode(torch.cat(take(ts.train_batches(8), 40)).flatten().tolist())
    assert len(train_text) > 40_000
    for doc in val:
        assert doc[:200] not in train_text


def test_extra_documents_are_mixed_into_training_only(numbered):
    extra = lambda seed: (f"EXTRA-{seed}-{i}" for i in range(4))  # noqa: E731  (runs out: restarts)
    cfg = DataConfig(source=str(numbered), val_docs=3, seed=5)
    ts = TokenStream(cfg, 9, extra_docs=extra, extra_every=2)
    docs = take(ts.train_documents(), 30)
    assert docs[2] == "EXTRA-5-0" and docs[5] == "EXTRA-5-1" and docs[14] == "EXTRA-5-0"
    assert [d[:5] for d in docs[:2]] == ["<d03>", "<d04>"]
    assert all("EXTRA" not in d for d in ts.val_documents())
    full = take(ts.train_batches(2), 40)
    assert same(take(TokenStream(cfg, 9, extra_docs=extra, extra_every=2).train_batches(2, start_step=23), 4), full[23:27])


def test_token_id_documents_go_in_as_they_are_several_per_insertion(numbered):
    """MQAR-style extra documents: lists of token ids (never re-tokenized), ``extra_count`` per insertion,
    and resuming mid-stream (which skips by counting tokens) gives the same batches."""
    extra = lambda seed: ([200 + seed, 201, 202 + i] for i in range(5))  # noqa: E731
    cfg = DataConfig(source=str(numbered), val_docs=3, seed=5, shuffle_rows=0)
    ts = TokenStream(cfg, 9, extra_docs=extra, extra_every=2, extra_count=3)
    docs = take(ts.train_documents(), 12)
    assert [type(d) for d in docs[:5]] == [str, str, list, list, list]
    assert docs[2:5] == [[205, 201, 202], [205, 201, 203], [205, 201, 204]] and docs[7:10] == [[205, 201, 205], [205, 201, 206], [205, 201, 202]]
    flat = torch.cat([b.flatten() for b in take(ts.train_batches(1), 60)]).tolist()  # unshuffled rows, end to end
    eos = ts.eos_id
    assert [205, 201, 202, eos, 205, 201, 203, eos] == flat[flat.index(205):flat.index(205) + 8]
    full = take(ts.train_batches(2), 30)
    again = TokenStream(cfg, 9, extra_docs=extra, extra_every=2, extra_count=3)
    assert same(take(again.train_batches(2, start_step=17), 4), full[17:21])


def test_marked_tokens_are_read_but_not_targets():
    batch = torch.tensor([[5, not_a_target(7), 9, not_a_target(0)], [1, 2, 3, 4]])
    tokens, targets = split_targets(batch)
    assert tokens.tolist() == [[5, 7, 9, 0], [1, 2, 3, 4]]
    assert targets.tolist() == [[-100, 9, -100], [2, 3, 4]]
    plain = torch.tensor([[1, 2, 3]])
    t, y = split_targets(plain)
    assert t is plain and y.tolist() == [[2, 3]]


def test_errors_name_the_bad_value(tmp_path, numbered):
    with pytest.raises(ConfigError, match="seq_len must be >= 1, got 0"):
        TokenStream(DataConfig(), 0)
    with pytest.raises(ConfigError, match="extra_every must be >= 1"):
        TokenStream(DataConfig(), 8, extra_docs=lambda s: iter(["x"]))
    with pytest.raises(ConfigError, match="extra_count must be >= 1, got 0"):
        TokenStream(DataConfig(), 8, extra_docs=lambda s: iter(["x"]), extra_every=1, extra_count=0)
    ts = TokenStream(DataConfig(val_docs=1), 8)
    with pytest.raises(ConfigError, match="batch_size must be >= 1, got 0"):
        next(ts.train_batches(0))
    with pytest.raises(ConfigError, match="no full row of 100001 tokens .val_docs=1.; raise val_docs"):
        TokenStream(DataConfig(val_docs=1), 100_000).val_batches(1)
    with pytest.raises(DataSourceError, match="does not exist"):  # at construction, not at the first batch
        TokenStream(DataConfig(source=str(tmp_path / "missing.txt")), 8)
    with pytest.raises(DataSourceError, match=r"no training documents.*val_docs=30"):
        next(TokenStream(DataConfig(source=str(numbered), val_docs=30), 8).train_batches(1))
