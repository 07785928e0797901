"""hlnas.score.lm: validation loss, the lm-eval adapter, and lm-eval runs on local JSONL tasks (offline)."""

from __future__ import annotations

import json
import math
import sys

import pytest
import torch
import torch.nn.functional as F
from lm_eval.api.instance import Instance

from hlnas.model.config import preset
from hlnas.data.tokenizer import ByteTokenizer
from hlnas.errors import ConfigError
from hlnas.model.layout import build_layout
from hlnas.model.build import build_model
from hlnas.score import lm as lm_module
from hlnas.score.lm import (
    PAPER_LM_TASKS, HlnasLM, TaskDataUnavailable, UnknownTaskError, run_lm_eval, validation_loss,
)

EOS = 0
CYCLE = "abcdefghij"  # the "cycle model" continues this alphabet greedily: ...j -> a -> b ...


class Latin1Tokenizer:
    """Bytes <-> str one to one (ByteTokenizer's decode replaces invalid UTF-8, hiding differences)."""

    name, vocab_size, eos_id = "latin1", 256, EOS

    def encode(self, text: str) -> list[int]:
        return list(text.encode("latin-1"))

    def decode(self, ids: list[int]) -> str:
        return bytes(ids).decode("latin-1")


def _random_model(seed: int = 0):
    torch.manual_seed(seed)
    return build_model(build_layout("transformer", None, 2), preset("proxy-tiny")).eval()


def _cycle_model():
    """A random 2-layer transformer whose LM head adds a strong bigram a->b->...->j->a.

    Its attention and MLPs stay live (scores still depend on the whole context), but greedy decoding
    of a cycle letter is the next letter, so generation has a known answer.
    """
    m = _random_model(1)
    with torch.no_grad():
        emb = m.embed.weight
        head = torch.zeros_like(m.lm_head.weight)
        for a, b in zip(CYCLE, CYCLE[1:] + CYCLE[0]):
            head[ord(b)] = 20.0 * emb[ord(a)] / emb[ord(a)].norm()
        m.lm_head.weight.copy_(head)
    return m


@pytest.fixture(scope="module")
def model():
    return _random_model(0)


@pytest.fixture(scope="module")
def cycle_model():
    return _cycle_model()


def _req(kind: str, *args) -> Instance:
    return Instance(request_type=kind, doc={}, arguments=tuple(args), idx=0)


@torch.no_grad()
def _direct_ll(model, ids: list[int], n_cont: int) -> tuple[float, bool]:
    """log p(last n_cont tokens of ids | the ones before), straight from one forward over ids[:-1]."""
    x = torch.tensor([ids[:-1]])
    logp = F.log_softmax(model(x)[0].float(), -1)[-n_cont:]
    tgt = torch.tensor(ids[-n_cont:])
    return logp.gather(-1, tgt[:, None]).sum().item(), bool((logp.argmax(-1) == tgt).all())


def _close(a: float, b: float, rel: float = 1e-4) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b), 1.0)


# ---- validation_loss -------------------------------------------------------------------------------


def test_validation_loss_is_token_weighted_cross_entropy(cycle_model):
    model = cycle_model
    g = torch.Generator().manual_seed(3)
    cycle = torch.tensor([list((CYCLE * 2)[i: i + 9].encode()) for i in range(2)])  # nearly free for this model
    batches = [cycle, torch.randint(1, 256, (3, 17), generator=g)]
    model.train()
    got = validation_loss(model, batches)
    assert model.training, "validation_loss must restore the model's mode"
    model.eval()
    with torch.no_grad():
        per_token = torch.cat([
            F.cross_entropy(model(b[:, :-1]).flatten(0, 1), b[:, 1:].flatten(), reduction="none") for b in batches
        ])
    assert got["tokens"] == 2 * 8 + 3 * 16 == per_token.numel()
    assert _close(got["loss"], per_token.mean().item(), 1e-5)
    assert _close(got["ppl"], math.exp(per_token.mean().item()), 1e-5)
    # a batch-weighted mean would differ: the batches have different sizes and losses
    batch_means = [per_token[:16].mean().item(), per_token[16:].mean().item()]
    assert not _close(got["loss"], sum(batch_means) / 2, 1e-4)


def test_validation_loss_rejects_bad_batches(model):
    with pytest.raises(ConfigError, match="expected an integer tensor"):
        validation_loss(model, [torch.arange(5)])
    with pytest.raises(ConfigError, match="no batches"):
        validation_loss(model, [])


# ---- HlnasLM, called directly ---------------------------------------------------------------------------


def test_loglikelihood_matches_direct_computation(model):
    lm = HlnasLM(model, ByteTokenizer(), max_length=16, batch_size=3)
    pairs = [
        ("hello", " world"),
        ("a" * 30 + "xyz", " end"),  # 1 + 33 + 4 tokens > 17: cut from the left
        ("", "abc"),  # empty context: conditioned on eos alone
        ("Answer: ", "yes"),  # trailing space moves to the continuation
        ("q", "r" * 16),  # a continuation exactly max_length long
    ]
    got = lm.loglikelihood([_req("loglikelihood", c, x) for c, x in pairs])
    for (ctx, cont), (ll, greedy) in zip(pairs, got):
        ids = ([EOS] + list((ctx + cont).encode()))[-17:]
        moved = len(ctx) - len(ctx.rstrip())  # lm-eval's rule: context's trailing spaces are scored with the continuation
        ref_ll, ref_greedy = _direct_ll(model, ids, len(cont.encode()) + moved)
        assert _close(ll, ref_ll), (ctx, cont, ll, ref_ll)
        assert greedy == ref_greedy
    assert lm.loglikelihood([_req("loglikelihood", "abc", "")]) == [(0.0, True)]
    with pytest.raises(ConfigError, match="does not fit in max_length=16"):
        lm.loglikelihood([_req("loglikelihood", "a", "b" * 17)])


def test_loglikelihood_is_greedy_flag(cycle_model):
    lm = HlnasLM(cycle_model, ByteTokenizer(), max_length=32)
    (_, on_cycle), (_, off_cycle) = lm.loglikelihood(
        [_req("loglikelihood", "x: ab", "cdef"), _req("loglikelihood", "x: ab", "cdxf")]
    )
    assert on_cycle is True and off_cycle is False


@pytest.mark.parametrize("n_bytes", [10, 48, 40], ids=["fits", "3-full-windows", "2-windows-and-a-tail"])
def test_rolling_loglikelihood_equals_minus_hlnas_loss(model, n_bytes):
    L = 16
    text = "".join(chr(ord("a") + (7 * i) % 26) for i in range(n_bytes))
    lm = HlnasLM(model, ByteTokenizer(), max_length=L, batch_size=2)
    (rolling,) = lm.loglikelihood_rolling([_req("loglikelihood_rolling", text)])

    seq = torch.tensor([EOS] + list(text.encode()))
    n_full = (len(seq) - 1) // L
    # hlnas's own loss over [eos] + text cut into [L + 1] windows that overlap by one token
    windows = [seq[k * L: k * L + L + 1][None] for k in range(n_full)]
    tail = (len(seq) - 1) - n_full * L
    if n_full == 0:
        windows = [seq[None]]
    nats = 0.0
    if windows:
        v = validation_loss(model, windows)
        nats = v["loss"] * v["tokens"]
    if n_full and tail:  # lm-eval's last window: a full max_length context, only the tail is scored
        ids = seq[-(L + 1):].tolist()
        nats -= _direct_ll(model, ids, tail)[0]
    assert _close(rolling, -nats), (rolling, -nats)
    if n_full == 0:  # and straight from the logits, without validation_loss
        assert _close(rolling, _direct_ll(model, seq.tolist(), n_bytes)[0])


@torch.no_grad()
def test_generate_until_uses_the_cache_and_matches_full_recompute(model):
    tok = Latin1Tokenizer()
    lm = HlnasLM(model, tok, max_length=64, batch_size=2)
    prompts = ["the cat sat on the", "a dog ran in a pa", "short"]  # two of one length decode as one batch
    refs = []
    for prompt in prompts:
        ids, ref = [EOS] + tok.encode(prompt), []
        for _ in range(12):  # greedy with a full forward every step (no cache)
            nxt = int(model(torch.tensor([ids + ref]))[0, -1].argmax())
            if nxt == EOS:
                break
            ref.append(nxt)
        assert len(ref) == 12, "precondition: the random model does not emit eos early"
        refs.append(tok.decode(ref))
    assert len(set(refs)) == 3
    got = lm.generate_until([_req("generate_until", p, {"until": [], "max_gen_toks": 12}) for p in prompts])
    assert got == refs
    # an until string cuts the text before its first occurrence
    stop = refs[0][5:7]
    (cut,) = lm.generate_until([_req("generate_until", prompts[0], {"until": ["\x00\x00never", stop], "max_gen_toks": 12})])
    assert cut == refs[0][: refs[0].find(stop)]
    assert stop not in cut and len(cut) <= 5


def test_generate_until_stops_at_until_and_max_gen_toks(cycle_model):
    lm = HlnasLM(cycle_model, ByteTokenizer(), max_length=32)
    reqs = [
        _req("generate_until", "x: ab", {"until": ["f"], "max_gen_toks": 20}),
        _req("generate_until", "x: ab", {"until": "fg", "max_gen_toks": 20}),  # a bare string works too
        _req("generate_until", "x: ab", {"until": ["z"], "max_gen_toks": 5}),
        _req("generate_until", "x: ab", {"until": ["b"], "max_gen_toks": 9}),
    ]
    assert lm.generate_until(reqs) == ["cde", "cde", "cdefg", "cdefghija"]
    with pytest.raises(ConfigError, match="greedily"):
        lm.generate_until([_req("generate_until", "x", {"do_sample": True, "temperature": 1.0})])


# ---- run_lm_eval on local JSONL tasks ------------------------------------------------------------------

MC_DOCS = [  # the cycle model prefers the choice continuing the alphabet; gold is not always that one
    {"question": "abc", "choices": ["def", "dxy", "qrs"], "label": 0},
    {"question": "fgh", "choices": ["ijk", "iqq", "zzz"], "label": 0},
    {"question": "abc", "choices": ["def", "xyz"], "label": 1},
    {"question": "ef", "choices": ["zz", "gh"], "label": 1},
]
PPL_DOCS = [{"text": "abcdefghij abc"}, {"text": "hello world"}, {"text": "".join(CYCLE[i % 7] for i in range(64))}]
GEN_DOCS = [  # until "e", at most 6 new tokens
    {"prompt": "x: ab", "answer": "cd"},  # stops at "e"
    {"prompt": "x: f", "answer": "ghijab"},  # stops at max_gen_toks
    {"prompt": "x: c", "answer": "dd"},  # generates "d": a miss
]


def _write_task(root, name: str, docs: list[dict], body: str) -> None:
    data = root / f"{name}.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in docs))
    # data_files must be absolute: lm-eval resolves relative paths against the CWD, not the YAML's folder
    (root / f"{name}.yaml").write_text(
        f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data.resolve()}\n"
        f"test_split: test\nmetadata: {{version: 1.0}}\n{body}"
    )


@pytest.fixture(scope="module")
def offline_env(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_DATASETS_OFFLINE", "1")
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("HF_DATASETS_CACHE", str(tmp_path_factory.mktemp("hf_datasets_cache")))
        # the libraries read these at import; if another test imported them first, set their flags too
        if "datasets" in sys.modules:
            mp.setattr(sys.modules["datasets"].config, "HF_HUB_OFFLINE", True, raising=False)
            mp.setattr(sys.modules["datasets"].config, "HF_DATASETS_OFFLINE", True, raising=False)
        if "huggingface_hub" in sys.modules:
            mp.setattr(sys.modules["huggingface_hub"].constants, "HF_HUB_OFFLINE", True, raising=False)
        yield


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory, offline_env):
    root = tmp_path_factory.mktemp("lm_tasks")
    _write_task(root, "toy_mc", MC_DOCS, (
        "output_type: multiple_choice\ndoc_to_text: '{{question}}'\ndoc_to_choice: '{{choices}}'\n"
        "doc_to_target: label\ntarget_delimiter: ''\nmetric_list:\n"
        "  - {metric: acc, aggregation: mean, higher_is_better: true}\n"
        "  - {metric: acc_norm, aggregation: mean, higher_is_better: true}\n"
    ))
    _write_task(root, "toy_ppl", PPL_DOCS, (
        "output_type: loglikelihood_rolling\ndoc_to_text: ''\ndoc_to_target: '{{text}}'\nmetric_list:\n"
        "  - {metric: word_perplexity, aggregation: weighted_perplexity, higher_is_better: false}\n"
        "  - {metric: byte_perplexity, aggregation: weighted_perplexity, higher_is_better: false}\n"
        "  - {metric: bits_per_byte, aggregation: bits_per_byte, higher_is_better: false}\n"
    ))
    _write_task(root, "toy_gen", GEN_DOCS, (
        "output_type: generate_until\ndoc_to_text: '{{prompt}}'\ndoc_to_target: '{{answer}}'\n"
        "generation_kwargs: {until: ['e'], max_gen_toks: 6, do_sample: false}\nmetric_list:\n"
        "  - {metric: exact_match, aggregation: mean, higher_is_better: true}\n"
    ))
    (root / "toy_hub.yaml").write_text(  # a Hub dataset that cannot be reached offline
        "task: toy_hub\ndataset_path: hlnas-offline-test/no-such-dataset\ntest_split: test\n"
        "output_type: multiple_choice\ndoc_to_text: '{{q}}'\ndoc_to_choice: '{{c}}'\ndoc_to_target: 0\n"
        "metric_list:\n  - {metric: acc}\nmetadata: {version: 1.0}\n"
    )
    return root


@pytest.fixture(scope="module")
def lm_eval_results(cycle_model, task_dir):
    return run_lm_eval(
        cycle_model, ByteTokenizer(), ["toy_mc", "toy_ppl", "toy_gen"], max_length=32,
        include_path=str(task_dir), batch_size=4,
    )


def test_run_lm_eval_returns_compact_metrics(lm_eval_results):
    assert set(lm_eval_results) == {"toy_mc", "toy_ppl", "toy_gen"}
    assert set(lm_eval_results["toy_mc"]) == {"acc", "acc_norm"}
    assert set(lm_eval_results["toy_ppl"]) == {"word_perplexity", "byte_perplexity", "bits_per_byte"}
    assert set(lm_eval_results["toy_gen"]) == {"exact_match"}


def test_lm_eval_multiple_choice_follows_direct_scores(lm_eval_results, cycle_model):
    acc = acc_norm = 0
    for doc in MC_DOCS:
        ids = [[EOS] + list((doc["question"] + c).encode()) for c in doc["choices"]]
        lls = [_direct_ll(cycle_model, s, len(c))[0] for s, c in zip(ids, doc["choices"])]
        acc += max(range(len(lls)), key=lambda i: lls[i]) == doc["label"]
        acc_norm += max(range(len(lls)), key=lambda i: lls[i] / len(doc["choices"][i])) == doc["label"]
    assert lm_eval_results["toy_mc"]["acc"] == pytest.approx(acc / len(MC_DOCS))
    assert lm_eval_results["toy_mc"]["acc_norm"] == pytest.approx(acc_norm / len(MC_DOCS))
    assert 0 < acc < len(MC_DOCS), "the docs should hold both hits and misses"


def test_lm_eval_rolling_perplexity_equals_validation_loss(lm_eval_results, cycle_model):
    L = 32
    batches = []
    for doc in PPL_DOCS:  # [eos] + text in [L + 1] windows overlapping by one (every text is <= L or 2L long)
        seq = torch.tensor([EOS] + list(doc["text"].encode()))
        batches += [seq[k: k + L + 1][None] for k in range(0, max(len(seq) - 1, 1), L)]
    v = validation_loss(cycle_model, batches)
    assert v["tokens"] == sum(len(d["text"]) for d in PPL_DOCS)
    assert lm_eval_results["toy_ppl"]["bits_per_byte"] == pytest.approx(v["loss"] / math.log(2), rel=1e-4)
    assert lm_eval_results["toy_ppl"]["byte_perplexity"] == pytest.approx(v["ppl"], rel=1e-4)


def test_lm_eval_generate_until_exact_match(lm_eval_results, cycle_model):
    lm = HlnasLM(cycle_model, ByteTokenizer(), max_length=32)
    outs = lm.generate_until([_req("generate_until", d["prompt"], {"until": ["e"], "max_gen_toks": 6}) for d in GEN_DOCS])
    assert outs == ["cd", "ghijab", "d"]
    assert lm_eval_results["toy_gen"]["exact_match"] == pytest.approx(2 / 3)


def test_unreachable_datasets_are_named(model, task_dir):
    # toy_hub's Hub dataset and the paper tasks' datasets cannot be reached offline; toy_mc's can
    with pytest.raises(TaskDataUnavailable) as err:
        run_lm_eval(model, ByteTokenizer(), ["toy_mc", "toy_hub", "arc_easy", "piqa"], max_length=16,
                    include_path=str(task_dir))
    assert set(err.value.missing) == {"toy_hub", "arc_easy", "piqa"}
    msg = str(err.value)
    for part in ("'toy_hub' needs dataset 'hlnas-offline-test/no-such-dataset'",
                 "'arc_easy' needs dataset 'allenai/ai2_arc' config 'ARC-Easy'", "'piqa' needs dataset 'baber/piqa'"):
        assert part in msg


def test_paper_tasks_resolve_without_the_full_index(offline_env):
    # the six names are found in a few of lm-eval's task folders, not by indexing all ~10k YAMLs
    tm = lm_module._task_manager(list(PAPER_LM_TASKS), None)
    assert set(PAPER_LM_TASKS) <= set(tm.all_tasks)
    assert len(tm.all_tasks) < 50


def test_unknown_task_name(model, task_dir, monkeypatch):
    from lm_eval.tasks import TaskManager

    # stand-in for lm-eval's full built-in index (slow to build), which would hold no 'toy_mcc' either
    monkeypatch.setattr(lm_module, "_build_task_manager",
                        lambda paths, defaults: TaskManager(include_path=list(paths), include_defaults=False))
    with pytest.raises(UnknownTaskError, match="'toy_mcc'. Did you mean: toy_mc?"):
        run_lm_eval(model, ByteTokenizer(), ["toy_mcc"], max_length=16, include_path=str(task_dir))
    with pytest.raises(ConfigError, match="not a directory"):
        run_lm_eval(model, ByteTokenizer(), ["toy_mc"], max_length=16, include_path=str(task_dir / "nope"))
