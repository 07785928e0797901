"""Text sources: synthetic, txt, jsonl/json, parquet, directories and Hugging Face (on a local folder)."""

from __future__ import annotations

import itertools
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hlnas.data import sources
from hlnas.data.corpus import synthetic_document
from hlnas.data.sources import DataConfig, DataSourceError, iter_documents
from hlnas.errors import ConfigError, HlnasError


def write_jsonl(path, texts, key="text"):
    path.write_text("".join(json.dumps({key: t, "id": i}) + "\n" for i, t in enumerate(texts)))


def write_parquet(path, texts, key="text", row_group_size=None):
    table = pa.table({"id": list(range(len(texts))), key: texts})
    pq.write_table(table, path, row_group_size=row_group_size)


def docs(source, **kw):
    return list(iter_documents(DataConfig(source=str(source), **kw)))


# ----- DataConfig
def test_config_round_trips_through_dict():
    cfg = DataConfig(source="x.jsonl", seed=3, val_docs=5, shuffle_rows=8, text_key="body")
    assert DataConfig.from_dict(cfg.to_dict()) == cfg
    assert DataConfig().to_dict()["source"] == "synthetic"


def test_config_rejects_unknown_keys_and_bad_values():
    with pytest.raises(ConfigError, match="unknown data config key 'val_doc'. Did you mean: val_docs"):
        DataConfig.from_dict({"val_doc": 3})
    with pytest.raises(ConfigError, match="val_docs must be >= 1, got 0"):
        DataConfig(val_docs=0)
    with pytest.raises(ConfigError, match="shuffle_rows must be >= 0"):
        DataConfig(shuffle_rows=-1)


# ----- each source
def test_synthetic_source_is_the_seeded_corpus():
    got = list(itertools.islice(iter_documents(DataConfig(seed=4)), 3))
    assert got == [synthetic_document(4, i) for i in range(3)]


def test_txt_documents_are_separated_by_blank_lines(tmp_path):
    f = tmp_path / "a.txt"
    f.write_text("first line\nsecond line\n\n\n  \nsecond doc\n\nthird doc")
    assert docs(f) == ["first line\nsecond line", "second doc", "third doc"]


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_jsonl_reads_text_key_and_skips_empty_rows(tmp_path, suffix):
    f = tmp_path / f"a{suffix}"
    f.write_text('{"body": "one", "n": 1}\n\n{"body": ""}\n{"body": null}\n{"body": "two\\nlines"}\n')
    assert docs(f, text_key="body") == ["one", "two\nlines"]


def test_parquet_is_read_in_batches_across_row_groups_in_order(tmp_path, monkeypatch):
    texts = [f"document {i}" for i in range(23)]
    f = tmp_path / "a.parquet"
    write_parquet(f, texts, row_group_size=5)
    monkeypatch.setattr(sources, "_PARQUET_BATCH_ROWS", 3)
    assert docs(f) == texts
    assert pq.ParquetFile(f).num_row_groups == 5


def test_directory_reads_supported_files_in_sorted_order(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / ".cache").mkdir()
    write_jsonl(tmp_path / "b" / "2.jsonl", ["b2-0", "b2-1"])
    write_parquet(tmp_path / "b" / "1.parquet", ["b1-0"])
    (tmp_path / "a.txt").write_text("a-0\n\na-1\n")
    (tmp_path / "c.jsonl").write_text('{"text": "c-0"}\n')
    (tmp_path / ".cache" / "x.jsonl").write_text('{"text": "hidden"}\n')
    (tmp_path / "README.md").write_text("not data")
    assert docs(tmp_path) == ["a-0", "a-1", "b1-0", "b2-0", "b2-1", "c-0"]


# ----- errors
def test_missing_path_names_it_and_the_allowed_sources(tmp_path):
    with pytest.raises(DataSourceError, match=r"'.*nope.jsonl' does not exist; give 'synthetic'.*hf:NAME"):
        docs(tmp_path / "nope.jsonl")


def test_unknown_extension_and_empty_directory(tmp_path):
    (tmp_path / "a.csv").write_text("text\nx\n")
    with pytest.raises(DataSourceError, match=r"extension '.csv'; allowed: .txt, .jsonl, .json, .parquet"):
        docs(tmp_path / "a.csv")
    with pytest.raises(DataSourceError, match="holds no file with extension"):
        docs(tmp_path)


def test_missing_column_names_the_columns_present(tmp_path):
    write_parquet(tmp_path / "a.parquet", ["x"], key="content")
    with pytest.raises(DataSourceError, match=r"no column 'text' \(text_key\); columns: id, content"):
        iter_documents(DataConfig(source=str(tmp_path / "a.parquet")))  # raised before iterating
    write_jsonl(tmp_path / "a.jsonl", ["x"], key="content")
    with pytest.raises(DataSourceError, match=r"a.jsonl:1 has no field 'text' \(text_key\); fields: content, id"):
        iter_documents(DataConfig(source=str(tmp_path / "a.jsonl")))


def test_json_array_and_non_text_values_are_explained(tmp_path):
    (tmp_path / "a.json").write_text('[{"text": "x"}]')
    with pytest.raises(DataSourceError, match="a.json:1 holds a list, not a JSON object"):
        docs(tmp_path / "a.json")
    (tmp_path / "b.jsonl").write_text('{"text": "ok"}\n{"text": 5}\n')
    with pytest.raises(DataSourceError, match="b.jsonl:2: field 'text' holds a int, not text"):
        docs(tmp_path / "b.jsonl")
    (tmp_path / "c.jsonl").write_text('{"text": "ok"}\n{"text": \n')
    with pytest.raises(DataSourceError, match="c.jsonl:2 is not valid JSON"):
        docs(tmp_path / "c.jsonl")


def test_errors_are_hlnas_errors():
    assert issubclass(DataSourceError, HlnasError)


# ----- Hugging Face (never downloads: a local folder through the same streaming code path)
@pytest.fixture
def offline(monkeypatch):
    import datasets.config
    import huggingface_hub.constants

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # datasets reads the variables at import time, which may already have happened.
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


def test_split_hf_spec(tmp_path):
    assert sources._split_hf("HuggingFaceFW/fineweb-edu:sample-10BT") == ("HuggingFaceFW/fineweb-edu", "sample-10BT")
    assert sources._split_hf("roneneldan/TinyStories") == ("roneneldan/TinyStories", None)
    odd = tmp_path / "with:colon"
    odd.mkdir()
    assert sources._split_hf(str(odd)) == (str(odd), None)


def test_hf_streams_a_local_dataset_folder(tmp_path, offline):
    data = tmp_path / "ds" / "data"
    data.mkdir(parents=True)
    texts = [f"hf document {i}" for i in range(12)]
    write_parquet(data / "train-00000-of-00002.parquet", texts[:7])
    write_parquet(data / "train-00001-of-00002.parquet", texts[7:])
    assert docs(f"hf:{tmp_path / 'ds'}") == texts
    with pytest.raises(DataSourceError, match=r"no column 'body' \(text_key\); columns: id, text"):
        iter_documents(DataConfig(source=f"hf:{tmp_path / 'ds'}", text_key="body"))
    with pytest.raises(DataSourceError, match="split 'validation'.*check that the folder"):
        iter_documents(DataConfig(source=f"hf:{tmp_path / 'ds'}", hf_split="validation"))


def test_hf_unreachable_dataset_names_it_and_the_remedy(offline):
    with pytest.raises(DataSourceError) as e:
        iter_documents(DataConfig(source="hf:hlnas-no-such-org/no-such-dataset:cfg"))
    msg = str(e.value)
    assert "'hlnas-no-such-org/no-such-dataset' (config 'cfg')" in msg
    assert "network" in msg and "local copy" in msg and "HF_DATASETS_OFFLINE" in msg
    with pytest.raises(DataSourceError, match="names no dataset"):
        iter_documents(DataConfig(source="hf:"))
