"""RULER generation (formats, budgets, determinism, cache), scoring, averages and the proxy protocol."""

import collections
import json
import re

import pytest

from hlnas.model.config import preset
from hlnas.data.tokenizer import ByteTokenizer
from hlnas.errors import ConfigError
from hlnas.model.layout import build_layout
from hlnas.model.build import build_model
from hlnas.score import generate as generate_mod
from hlnas.recall import ruler, ruler_tasks
from hlnas.recall.ruler import (GROUP_WEIGHTS, RULER_GROUPS, RULER_TASKS, RulerLengthError, generate_samples,
                                ruler_training_documents)
from hlnas.score.ruler import aggregate, evaluate_ruler, score_sample

TOK = ByteTokenizer()
SYNTHETIC = [t for t in RULER_TASKS if not t.startswith("qa")]
PREFIX_END = {"vt": "they are: ", "cwe": "in the list are:", "fwe": "appeared words are:"}
NEW_TOKENS = {"vt": 30, "cwe": 120, "fwe": 50}


pytestmark = pytest.mark.usefixtures("one_thread")


class WordTokenizer:
    """One token per whitespace-separated word: a tokenizer far coarser than bytes."""

    name, vocab_size, eos_id = "words", 1000, 0

    def encode(self, text):
        return [hash(w) % 1000 for w in text.split()]

    def decode(self, ids):
        return " ".join(map(str, ids))


@pytest.fixture(scope="module")
def samples():
    return {t: generate_samples(t, TOK, 2048, 2, seed=1) for t in SYNTHETIC}


@pytest.mark.parametrize("task", SYNTHETIC)
def test_budget_fill_prefix_answers(samples, task):
    for s in samples[task]:
        used = len(TOK.encode(s.prompt)) + s.max_new_tokens
        assert 0.8 * 2048 <= used <= 2048, f"{task}: {used} tokens used of 2048"
        assert s.max_new_tokens == NEW_TOKENS.get(task, 128)
        expected_end = PREFIX_END.get(task, "mentioned in the provided text " + ("are" if task in ("niah_multivalue", "niah_multiquery") else "is"))
        assert s.prompt.endswith(expected_end)
        assert s.answers and all(a in s.prompt for a in s.answers)
        assert score_sample(task, s.completion, s.answers) == 1.0
        assert (s.task, s.length, s.seed) == (task, 2048, 1)


def test_budget_holds_under_another_tokenizer():
    s = generate_samples("niah_single_1", WordTokenizer(), 512, 1, seed=0)[0]
    words = len(s.prompt.split())
    assert 512 - 128 - 19 <= words <= 512 - 128  # filled to within one noise block (19 words)
    assert len(s.prompt) > 3 * 512  # far more text than a 512-byte budget would hold


def test_niah_formats(samples):
    single = samples["niah_single_1"][0].prompt
    assert single.startswith("A special magic number is hidden within the following text.")
    assert "What is the special magic number for " in single
    key = re.search(r"special magic number for (\S+) mentioned", single).group(1)
    assert re.fullmatch(r"[a-z]+-[a-z]+", key)
    assert f"One of the special magic numbers for {key} is: {samples['niah_single_1'][0].answers[0]}." in single
    assert "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.\n" in single

    multi = samples["niah_multivalue"][0]
    assert multi.prompt.startswith("Some special magic numbers are hidden")
    assert len(multi.answers) == 4 and len(re.findall(r"One of the special magic numbers for", multi.prompt)) == 4
    query = samples["niah_multiquery"][0]
    assert re.search(r"for \S+, \S+, \S+, and \S+ mentioned in the provided text are$", query.prompt)

    distract = samples["niah_multikey_2"][0].prompt.split("\n")[1:-1]
    assert len(distract) > 10 and all(line.startswith("One of the special magic numbers for ") for line in distract)
    uu = samples["niah_multikey_3"][0]
    uuid_re = r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"
    assert re.fullmatch(uuid_re, uu.answers[0])
    assert re.search(rf"magic uuid for {uuid_re} mentioned", uu.prompt)

    for s in samples["niah_single_2"] + samples["niah_multiquery"]:
        essay = s.prompt.split("afterwards.\n", 1)[1]
        assert "The grass is green" not in essay and essay.count(". ") > 20
        for m in re.finditer(r"One of the special magic numbers", essay):
            # inserted between sentences, or after the last (possibly cut) sentence at depth 100
            tail = essay[m.start() :].split("\nWhat are all")[0].split("\nWhat is")[0]
            at_end = re.fullmatch(r"(One of the special magic numbers for \S+ is: \d+\.)( One of the special magic numbers for \S+ is: \d+\.)*", tail)
            assert m.start() == 0 or re.search(r"[.!?] $", essay[: m.start()]) or at_end


def test_builtin_essay_when_the_corpus_module_is_absent(monkeypatch):
    monkeypatch.setattr(ruler_tasks, "_corpus_document", None)
    monkeypatch.setattr(ruler_tasks, "_essay_chunks", [])
    monkeypatch.setattr(ruler_tasks, "_essay_word_ends", [])
    words = ruler_tasks.essay_words(300)
    assert len(words) == 300 and words == ruler_tasks.essay_words(300)
    text = " ".join(words)
    assert text.count(". ") > 20 and all(w.strip(".,").isalpha() for w in words)


def test_vt_chain_and_one_shot_example(samples):
    s = samples["vt"][0]
    parts = s.prompt.split("\n\nMemorize and track")
    assert len(parts) == 2, "one one-shot example, then the task"
    example, task = parts
    icl_names = re.findall(r"VAR ([A-Z]+) =", example)
    assert len(icl_names) == 5 and all(len(n) == 3 for n in icl_names)
    assert example.endswith("they are: " + " ".join(icl_names))
    chain = re.findall(r"VAR ([A-Z]{5}) = (?:VAR ([A-Z]{5})|(\d{5}))", task)
    assert [c[0] for c in chain] == s.answers
    assert all(chain[i + 1][1] == chain[i][0] for i in range(4)), "chain order is kept"
    assert f"assigned the value {chain[0][2]} in the text above" in task


def test_cwe_answers_are_the_most_common_words(samples):
    s = samples["cwe"][0]
    listing = s.prompt.split("Memorize the ones that appear most often.\n")[-1].split("\nQuestion")[0]
    counts = collections.Counter(re.findall(r"\d+\. (\S+)", listing))
    assert sorted(w for w, _ in counts.most_common(10)) == sorted(s.answers)
    assert {counts[w] for w in s.answers} == {6} and max(c for w, c in counts.items() if w not in s.answers) == 1
    assert s.prompt.count("Question: What are the 10 most common words") == 2  # one-shot example first


def test_fwe_answers_are_ranks_two_to_four(samples):
    s = samples["fwe"][0]
    words = s.prompt.split("coded words. ")[1].split("\nQuestion")[0].split()
    counts = collections.Counter(w for w in words if w != "...")
    top = [w for w, _ in counts.most_common(3)]
    assert top == s.answers
    assert counts.most_common(4)[2][1] > counts.most_common(4)[3][1]
    assert words.count("...") > counts[s.answers[0]]  # rank 1 is the noise word


def _squad(path):
    arts = []
    for a in range(3):
        paras = []
        for p in range(3):
            ctx = f"Article {a} paragraph {p} says the secret code is code{a}{p}. " + "Filler text. " * 5
            qas = [{"id": f"{a}{p}", "question": f"What is the code of article {a} paragraph {p}?", "answers": [{"text": f"code{a}{p}"}, {"text": f"CODE{a}{p}!"}], "is_impossible": False}]
            qas.append({"id": f"x{a}{p}", "question": "Unanswerable?", "answers": [], "is_impossible": True})
            paras.append({"context": ctx, "qas": qas})
        arts.append({"title": f"T{a}", "paragraphs": paras})
    path.write_text(json.dumps({"version": "v2.0", "data": arts}))
    return str(path)


def _hotpot(path):
    data = [
        {"question": f"Who is number {i}?", "answer": f"person{i}", "context": [[f"Title{i}", [f"Person{i} is", f" number {i}."]], [f"Other{i}", ["Nothing here."]]]}
        for i in range(6)
    ]
    path.write_text(json.dumps(data))
    return str(path)


def test_qa_from_local_files(tmp_path):
    squad = generate_samples("qa_1", TOK, 1024, 3, 0, qa_file=_squad(tmp_path / "squad.json"))
    for i, s in enumerate(squad):
        a, p = divmod(i, 3)
        assert s.answers == [f"code{a}{p}", f"CODE{a}{p}!"]  # question i, unanswerable ones dropped
        assert f"Article {a} paragraph {p} says" in s.prompt and "Document 1:\n" in s.prompt
        assert s.prompt.endswith(f"Question: What is the code of article {a} paragraph {p}? Answer:")
        assert len(TOK.encode(s.prompt)) + 32 <= 1024
    hot = generate_samples("qa_2", TOK, 1024, 2, 0, qa_file=_hotpot(tmp_path / "hotpot.json"))
    assert hot[1].answers == ["person1"] and "Title1\nPerson1 is number 1." in hot[1].prompt
    assert score_sample("qa_1", "It is CODE00", squad[0].answers) == 1.0
    with pytest.raises(ConfigError, match="qa_file"):
        generate_samples("qa_1", TOK, 1024, 1, 0)


def test_deterministic_and_independent_of_n():
    a = generate_samples("niah_multikey_1", TOK, 1024, 3, seed=7)
    assert a == generate_samples("niah_multikey_1", TOK, 1024, 3, seed=7)
    assert a[:2] == generate_samples("niah_multikey_1", TOK, 1024, 2, seed=7)
    b = generate_samples("niah_multikey_1", TOK, 1024, 3, seed=8)
    assert all(x.prompt != y.prompt for x, y in zip(a, b))


def test_cache_loads_without_regenerating(tmp_path, monkeypatch):
    first = generate_samples("vt", TOK, 1024, 2, 0, cache_dir=str(tmp_path))
    assert len(list(tmp_path.glob("vt-L1024-n2-s0-*.json"))) == 1

    def boom(*a, **k):
        raise AssertionError("regenerated despite the cache")

    monkeypatch.setattr(ruler, "_generate", boom)
    assert generate_samples("vt", TOK, 1024, 2, 0, cache_dir=str(tmp_path)) == first
    with pytest.raises(AssertionError, match="regenerated"):  # another tokenizer is another key
        generate_samples("vt", WordTokenizer(), 1024, 2, 0, cache_dir=str(tmp_path))


def test_score_sample_all_and_part():
    refs = ["1234567", "ABC"]
    assert score_sample("niah_multivalue", "the 1234567 and abc", refs) == 1.0
    assert score_sample("niah_multivalue", "only 1234567", refs) == 0.5
    assert score_sample("niah_single_1", "nothing", ["1234567"]) == 0.0
    assert score_sample("qa_2", "only abc", refs) == 1.0  # part: any reference
    assert score_sample("cwe", "  a\x01bc ", ["a\nb"]) == 1.0  # control characters become newlines
    with pytest.raises(ConfigError, match="Did you mean"):
        score_sample("niah_singel_1", "x", ["x"])


def test_aggregate_weights_and_missing_groups():
    scores = {t: i / 20 for i, t in enumerate(RULER_TASKS)}
    full = aggregate(scores)
    assert full["complete"] and full["average"] == pytest.approx(sum(scores.values()) / 13)
    assert full["groups"]["Singlevalue"] == pytest.approx((0 + 1 + 2) / 60)
    # the paper's Table 5 rows (paper_grid.md 1e): group columns -> reported Avg, within rounding
    rows = {
        (0.349, 0.471, 0.361, 0.791, 0.155, 0.391, 0.191): 0.426,
        (0.313, 0.22, 0.196, 0.784, 0.063, 0.342, 0.234): 0.365,
        (0.293, 0.542, 0.502, 0.875, 0.271, 0.300, 0.024): 0.440,
        (0.358, 0.509, 0.507, 0.660, 0.412, 0.364, 0.014): 0.434,
    }
    for cols, avg in rows.items():
        by_group = dict(zip(GROUP_WEIGHTS, cols))
        assert aggregate({t: by_group[RULER_GROUPS[t]] for t in RULER_TASKS})["average"] == pytest.approx(avg, abs=6e-4)
    no_qa = aggregate({t: s for t, s in scores.items() if not t.startswith("qa")})
    assert not no_qa["complete"] and no_qa["missing_groups"] == ["QA"] and no_qa["missing_tasks"] == ["qa_1", "qa_2"]
    assert no_qa["average"] == pytest.approx(sum(list(scores.values())[:11]) / 11)
    half_qa = aggregate({**scores, "qa_2": None})
    assert half_qa["groups"]["QA"] == scores["qa_1"] and half_qa["missing_groups"] == []


def test_training_documents_are_disjoint_from_evaluation(tmp_path):
    tasks = ["niah_single_1", "niah_multikey_2", "vt", "fwe", "qa_1"]
    qa = {"qa_1": _squad(tmp_path / "s.json")}
    evals = [s for t in tasks for s in generate_samples(t, TOK, 1024, 4, seed=3, qa_file=qa.get(t))]
    stream = ruler_training_documents(TOK, 1024, seed=3, tasks=tasks, qa_files=qa, qa_question_offset=4)
    docs = [next(stream) for _ in range(4 * len(tasks))]
    assert all(len(TOK.encode(d)) <= 1024 for d in docs)
    for d in docs:
        assert not any(d.startswith(e.prompt) for e in evals)
    eval_questions = {e.prompt.rsplit("Question: ", 1)[1] for e in evals if e.task == "qa_1"}
    train_questions = {d.rsplit("Question: ", 1)[1].split(" Answer:")[0] + " Answer:" for d in docs[4::5]}
    assert train_questions and not eval_questions & train_questions
    assert docs[0].startswith("A special magic number") and docs[0].endswith(".")  # prompt + completion
    assert docs[2].startswith("Memorize") and re.search(r"they are: [A-Z]{5}( [A-Z]{5}){4}$", docs[2])
    with pytest.raises(ConfigError, match="2\\*\\*31"):
        generate_samples("vt", TOK, 1024, 1, seed=2**31)


def test_evaluate_ruler_scores_an_oracle_perfectly(tmp_path, monkeypatch):
    tasks = ["niah_single_1", "cwe", "qa_1", "qa_2"]
    qa = {"qa_1": _squad(tmp_path / "s.json")}
    truth = {s.prompt: s.completion for t in tasks[:3] for s in generate_samples(t, TOK, 2048, 2, 0, qa_file=qa.get(t))}
    monkeypatch.setattr(generate_mod, "greedy_generate", lambda m, tok, prompts, n, **k: [truth[p] for p in prompts])
    out = evaluate_ruler(None, TOK, tasks, [2048], n=2, seed=0, qa_files=qa)
    assert out["tasks"] == {"niah_single_1": 1.0, "cwe": 1.0, "qa_1": 1.0}
    assert out["skipped"] == {"qa_2": "no QA data file given (qa_files)"}
    assert out["average"] == 1.0 and out["per_length"][2048]["groups"]["QA"] == 1.0
    assert "Multikey" in out["missing_groups"]


def test_evaluate_ruler_with_a_tiny_model(tmp_path):
    model = build_model(build_layout("transformer", None, 2), preset("proxy-tiny"))
    out = evaluate_ruler(model, TOK, ["niah_single_1", "fwe"], [1024], n=1, seed=0, cache_dir=str(tmp_path))
    assert set(out["tasks"]) == {"niah_single_1", "fwe"} and all(0.0 <= v <= 1.0 for v in out["tasks"].values())
    assert out["scale"] == "fraction in [0, 1]" and out["lengths"] == [1024]
    assert len(list(tmp_path.glob("*.json"))) == 2


def test_too_short_length_says_so():
    with pytest.raises(RulerLengthError, match="does not fit in length 300"):
        generate_samples("niah_single_1", TOK, 300, 1, 0)


def test_a_task_too_long_for_one_length_is_scored_at_the_others(monkeypatch):
    # cwe's shortest prompt needs ~1.7k byte tokens: it runs at 2048 and is reported skipped at 1024
    truth = {s.prompt: s.completion for L in (1024, 2048) for t in ("niah_single_1", "cwe")
             for s in (generate_samples(t, TOK, L, 2, 0) if t != "cwe" or L == 2048 else [])}
    monkeypatch.setattr(generate_mod, "greedy_generate", lambda m, tok, prompts, n, **k: [truth[p] for p in prompts])
    out = evaluate_ruler(None, TOK, ["niah_single_1", "cwe"], [1024, 2048], n=2, seed=0)
    assert out["tasks"] == {"niah_single_1": 1.0, "cwe": 1.0}
    assert set(out["per_length"][1024]["tasks"]) == {"niah_single_1"} and set(out["per_length"][2048]["tasks"]) == {"niah_single_1", "cwe"}
    assert out["skipped"] == {"cwe": "does not fit length(s) 1024; scored at the others"}
    only_short = evaluate_ruler(None, TOK, ["niah_single_1", "cwe"], [1024], n=2, seed=0)
    assert set(only_short["tasks"]) == {"niah_single_1"}
    assert only_short["skipped"] == {"cwe": "does not fit any evaluated length (1024 tokens)"}


def test_default_training_documents_leave_out_tasks_that_do_not_fit(caplog):
    stream = ruler_training_documents(TOK, 1024, seed=0)
    docs = [next(stream) for _ in range(10)]  # one round of the 10 non-QA tasks that fit 1024 bytes
    assert "RULER task cwe does not fit 1024 tokens; left out" in caplog.text
    assert all(len(TOK.encode(d)) <= 1024 for d in docs)
    assert not any("10 most common words" in d for d in docs)  # cwe's question
    with pytest.raises(RulerLengthError, match="'cwe' does not fit in length 1024"):
        next(ruler_training_documents(TOK, 1024, seed=0, tasks=["cwe"]))
