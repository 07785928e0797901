"""RULER's task instances for hlnas: the sample cache, the task and group tables, and training documents.

Task generation lives in :mod:`hlnas.recall.ruler_tasks` (formats and deviations from NVIDIA RULER are listed there).
Scoring a model on these samples is :mod:`hlnas.score.ruler`'s.

Proxy protocol (small models cannot do zero-shot RULER): :func:`ruler_training_documents` yields complete
instances (prompt + ideal completion) to mix into training. Evaluation seeds lie in [0, 2**31); training
instances of base seed ``s`` are drawn with seed ``2**31 + s``, and QA training uses questions from index
500 on (evaluation uses questions ``0..n-1``, n <= 500), so training never sees an evaluation instance.
Evaluate at the training length and longer.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass

from hlnas.errors import ConfigError, did_you_mean
from hlnas.recall.ruler_tasks import ESSAY_SOURCE, QAData, RulerLengthError, TaskGenerator

log = logging.getLogger(__name__)

__all__ = [
    "RULER_TASKS",
    "check_task",
    "RULER_GROUPS",
    "GROUP_WEIGHTS",
    "RulerSample",
    "RulerLengthError",
    "load_qa_file",
    "generate_samples",
    "ruler_training_documents",
    "TRAIN_SEED_OFFSET",
    "QA_TRAIN_QUESTION_OFFSET",
]

RULER_TASKS = (
    "niah_single_1", "niah_single_2", "niah_single_3",
    "niah_multikey_1", "niah_multikey_2", "niah_multikey_3",
    "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe", "qa_1", "qa_2",
)  # fmt: skip
RULER_GROUPS = {
    **{f"niah_single_{i}": "Singlevalue" for i in (1, 2, 3)},
    **{f"niah_multikey_{i}": "Multikey" for i in (1, 2, 3)},
    "niah_multivalue": "Multivalue",
    "niah_multiquery": "Multiquery",
    "vt": "VT",
    "cwe": "CWE+FWE",
    "fwe": "CWE+FWE",
    "qa_1": "QA",
    "qa_2": "QA",
}
GROUP_WEIGHTS = {"Multikey": 3, "Multiquery": 1, "Multivalue": 1, "Singlevalue": 3, "CWE+FWE": 2, "QA": 2, "VT": 1}
QA_TASKS = ("qa_1", "qa_2")
PART_MATCH_TASKS = frozenset(QA_TASKS)
TRAIN_SEED_OFFSET = 2**31
QA_TRAIN_QUESTION_OFFSET = 500  # RULER evaluates the first 500 questions
GENERATOR_VERSION = 1  # bump when generated text changes, so cached samples are not reused


@dataclass(frozen=True)
class RulerSample:
    task: str
    length: int  # context budget in tokens: prompt + max_new_tokens <= length
    index: int
    prompt: str  # ends with the answer prefix
    answers: list[str]
    max_new_tokens: int
    completion: str = ""  # the ideal continuation (proxy training, tests)
    seed: int = 0


def check_task(task: str) -> None:
    if task not in RULER_TASKS:
        raise ConfigError(f"unknown RULER task '{task}'.{did_you_mean(task, RULER_TASKS)} Allowed: {', '.join(RULER_TASKS)}")


def _file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def load_qa_file(path: str) -> QAData:
    """A SQuAD-2.0-format (``{"data": [...]}``) or HotpotQA-format (list of questions) JSON file.

    SQuAD: unanswerable questions dropped, references = all gold answer texts, the other paragraphs of
    the article are the preferred distractors. HotpotQA: one reference; all the question's paragraphs
    (``title\\n`` + joined sentences) go in. Documents are deduplicated and sorted, as in RULER.
    """
    if not os.path.isfile(path):
        raise ConfigError(f"QA file '{path}' does not exist; give a local SQuAD-2.0 or HotpotQA JSON file")
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        paras = [[p["context"] for p in art["paragraphs"]] for art in data["data"]]
        docs = sorted({c for art in paras for c in art})
        idx = {d: i for i, d in enumerate(docs)}
        questions = []
        for art in data["data"]:
            article = [idx[p["context"]] for p in art["paragraphs"]]
            for p in art["paragraphs"]:
                me = idx[p["context"]]
                for qa in p.get("qas", []):
                    refs = [a["text"] for a in qa.get("answers", [])]
                    if qa.get("is_impossible", False) or not refs:
                        continue
                    questions.append((qa["question"], refs, [me], [i for i in article if i != me]))
        kind = "squad"
    elif isinstance(data, list) and all(isinstance(d, dict) and "context" in d for d in data):
        def doc(title_sents) -> str:
            title, sents = title_sents
            return f"{title}\n{''.join(sents)}"

        docs = sorted({doc(c) for d in data for c in d["context"]})
        idx = {d: i for i, d in enumerate(docs)}
        questions = [(d["question"], [d["answer"]], [idx[doc(c)] for c in d["context"]], []) for d in data]
        kind = "hotpotqa"
    else:
        raise ConfigError(f"QA file '{path}' is neither SQuAD format ({{'data': [...]}}) nor HotpotQA format (a list of questions with 'context')")
    if not questions:
        raise ConfigError(f"QA file '{path}' holds no answerable questions")
    return QAData(kind, questions, docs)


def _tok_name(tokenizer) -> str:
    return f"{getattr(tokenizer, 'name', type(tokenizer).__name__)}|{getattr(tokenizer, 'vocab_size', '?')}"


def generate_samples(
    task: str,
    tokenizer,
    length: int,
    n: int,
    seed: int,
    qa_file: str | None = None,
    cache_dir: str | None = None,
) -> list[RulerSample]:
    """``n`` samples of ``task`` whose prompt plus max new tokens fit in ``length`` tokens of ``tokenizer``.

    Deterministic in (task, tokenizer, length, seed, QA file); sample ``i`` does not depend on ``n``.
    ``seed`` must lie in [0, 2**31) (larger seeds are reserved for training instances). With ``cache_dir``
    the samples are stored as JSON keyed by (task, tokenizer name and vocab size, length, n, seed, QA file
    SHA-256, essay-text source, generator version) and loaded on later calls instead of regenerated.
    """
    check_task(task)
    if not 0 <= seed < TRAIN_SEED_OFFSET:
        raise ConfigError(f"evaluation seed must lie in [0, 2**31), got {seed}; seeds from 2**31 are reserved for training instances")
    if n < 1 or length < 1:
        raise ConfigError(f"n and length must be >= 1, got n={n}, length={length}")
    if task in QA_TASKS:
        if qa_file is None:
            raise ConfigError(f"task '{task}' needs qa_file (a local SQuAD-2.0 or HotpotQA JSON file)")
        if n > QA_TRAIN_QUESTION_OFFSET:
            raise ConfigError(f"task '{task}': n={n} > {QA_TRAIN_QUESTION_OFFSET} would reach the questions reserved for training")
    key = {
        "task": task, "tokenizer": _tok_name(tokenizer), "length": int(length), "n": int(n), "seed": int(seed),
        "qa_sha256": _file_sha256(qa_file) if task in QA_TASKS else "", "version": GENERATOR_VERSION,
        "essay": ESSAY_SOURCE,
    }  # fmt: skip
    path = None
    if cache_dir is not None:
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
        path = os.path.join(cache_dir, f"{task}-L{length}-n{n}-s{seed}-{digest}.json")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                stored = json.load(f)
            if stored.get("key") == key:
                return [RulerSample(**s) for s in stored["samples"]]
    samples = _generate(task, tokenizer, length, n, seed, qa_file)
    if path is not None:
        os.makedirs(cache_dir, exist_ok=True)
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"key": key, "samples": [asdict(s) for s in samples]}, f)
        os.replace(tmp, path)  # atomic: a concurrent reader never sees half a file
    return samples


def _generate(task, tokenizer, length, n, seed, qa_file) -> list[RulerSample]:
    qa = load_qa_file(qa_file) if task in QA_TASKS else None
    gen = TaskGenerator(task, tokenizer, length, seed, qa=qa)
    out = []
    for i in range(n):
        inst = gen.sample(i)
        out.append(RulerSample(task, int(length), i, inst.prompt, list(inst.answers), gen.max_new, inst.completion, int(seed)))
    return out


def ruler_training_documents(
    tokenizer,
    length: int,
    seed: int,
    tasks: Sequence[str] | None = None,
    qa_files: Mapping[str, str] | None = None,
    qa_question_offset: int = QA_TRAIN_QUESTION_OFFSET,
) -> Iterator[str]:
    """An endless stream of complete RULER instances (prompt + ideal completion) for proxy training.

    Tasks are taken round-robin (default: the 11 non-QA tasks, plus QA tasks given in ``qa_files``, less
    any whose shortest prompt does not fit ``length``; a task named in ``tasks`` must fit);
    each document has at most ``length`` tokens. Instances use seed ``2**31 + seed`` and QA questions from
    index ``qa_question_offset`` (500) on, cycling through the rest of the file, so they are disjoint from
    :func:`generate_samples` at any evaluation seed (see the module docstring). A smaller offset is only
    for tiny QA files; it keeps QA disjoint only while evaluation uses ``n <= qa_question_offset``.
    """
    if not 0 <= seed < TRAIN_SEED_OFFSET:
        raise ConfigError(f"base seed must lie in [0, 2**31), got {seed}")
    qa_files = dict(qa_files or {})
    default_tasks = tasks is None
    if tasks is None:
        tasks = [t for t in RULER_TASKS if t not in QA_TASKS or t in qa_files]
    for t in tasks:
        check_task(t)
        if t in QA_TASKS and t not in qa_files:
            raise ConfigError(f"training task '{t}' needs a QA file in qa_files")
    if not tasks:
        raise ConfigError("ruler_training_documents needs at least one task")
    gens: dict[str, TaskGenerator] = {}
    if default_tasks:  # drop (and say) what cannot fit this length rather than fail a whole training run
        fit = []
        for task in tasks:
            qa = load_qa_file(qa_files[task]) if task in QA_TASKS else None
            try:
                gens[task] = TaskGenerator(task, tokenizer, length, TRAIN_SEED_OFFSET + seed, qa=qa,
                                           question_offset=qa_question_offset, wrap_questions=True)
                fit.append(task)
            except RulerLengthError:
                log.warning("recall training documents: RULER task %s does not fit %d tokens; left out", task, length)
        if not fit:
            raise ConfigError(f"no RULER task fits recall documents of {length} tokens; use a longer train.recall_length")
        tasks = fit
    i = 0
    while True:
        task = tasks[i % len(tasks)]
        if task not in gens:
            qa = load_qa_file(qa_files[task]) if task in QA_TASKS else None
            gens[task] = TaskGenerator(
                task, tokenizer, length, TRAIN_SEED_OFFSET + seed, qa=qa, question_offset=qa_question_offset, wrap_questions=True
            )
        inst = gens[task].sample(i // len(tasks))
        yield inst.prompt + inst.completion
        i += 1
