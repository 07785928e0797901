"""Multi-hop variable tracking (hlnas.recall.vt): the generator, its no-recall baselines, its settings in
``score.mqar``, and one fresh-model run on it."""

from __future__ import annotations

import math
import re

import pytest
import torch

from hlnas.model.config import preset
from hlnas.errors import ConfigError, HlnasError
from hlnas.model.layout import Layout
from hlnas.overrides import yaml_load
from hlnas.score.objectives import MqarConfig, ScoreConfig
from hlnas.recall.proxy import recall_task, train_mqar
from hlnas.recall.vt import (ASSIGN, FILLER, QUERY, VtConfig, VtTask, accuracy_by_hop, make_vt, order_leak, trace_answers,
                            vt_baselines)

pytestmark = pytest.mark.usefixtures("one_thread")

IGNORE = -100


def _check_instances(cfg: VtTask, x: torch.Tensor, y: torch.Tensor) -> list[int]:
    """Every structural promise of one batch; returns the hops of every query (traced)."""
    V, half = cfg.vocab_size, cfg.vocab_size // 2
    lo, hi = cfg.hop_range
    assert x.shape == y.shape == (x.shape[0], cfg.seq_len)
    hops_seen = []
    for xs, ys, traced in zip(x.tolist(), y.tolist(), trace_answers(x, y, V)):
        # statements: `dest = src`, each variable assigned once, every source assigned before it is used
        defined, chains_of, first_value = {}, {}, {}
        for i in range(1, len(xs) - 1):
            if xs[i] != ASSIGN:
                continue
            dest, src = xs[i - 1], xs[i + 1]
            assert 3 <= dest < half and dest not in defined
            if src >= half:  # a chain's first statement
                assert src < V and src not in first_value.values()
                chains_of[dest] = dest
                first_value[dest] = src
            else:  # chain order kept: the source was assigned earlier
                assert src in defined, "a statement uses a variable before its assignment"
                chains_of[dest] = chains_of[src]
            defined[dest] = i
        assert len(first_value) == cfg.chains  # one value per chain, all distinct
        lengths = {}
        for root in chains_of.values():
            lengths[root] = lengths.get(root, 0) + 1
        assert all(lo <= n - 1 <= hi for n in lengths.values())  # hops as configured
        # queries: `? x` after every statement, labels only there, each chain asked once
        qpos = [q for q, v in enumerate(ys) if v != IGNORE]
        assert len(qpos) == cfg.chains and all(xs[q - 1] == QUERY for q in qpos)
        assert min(qpos) > max(defined.values()) + 1
        assert sorted(chains_of[xs[q]] for q in qpos) == sorted(first_value)
        assert xs.count(QUERY) == cfg.chains and all(v == IGNORE or v >= half for v in ys)
        for (label, value, hops), q in zip(traced, qpos):  # every answer follows its chain back to the value
            assert value == label == first_value[chains_of[xs[q]]]
            if cfg.query == "last":
                assert hops == lengths[chains_of[xs[q]]] - 1
            hops_seen.append(hops)
        # nothing but filler after the last query and between the statements and the queries
        assert all(t == FILLER for t in xs[max(qpos) + 1:])
    return hops_seen


@pytest.mark.parametrize("cfg", [
    VtTask(vocab_size=64, seq_len=64, chains=3, hops=2),
    VtTask(vocab_size=64, seq_len=96, chains=4, hops=(0, 3)),
    VtTask(vocab_size=64, seq_len=96, chains=4, hops=(1, 3), query="any"),
    VtTask(vocab_size=32, seq_len=10, chains=2, hops=0),  # MQAR with '=': one lookup
])
def test_every_answer_follows_its_chain_back_to_its_value(cfg):
    x, y = make_vt(cfg, 64, seed=3)
    hops = _check_instances(cfg, x, y)
    lo, hi = cfg.hop_range
    assert set(hops) == set(range(0 if cfg.query == "any" else lo, hi + 1))  # every hop count of the range occurs


def test_the_interleaving_is_random_but_keeps_each_chain_in_order():
    cfg = VtTask(vocab_size=64, seq_len=64, chains=3, hops=2)
    x, _ = make_vt(cfg, 200, seed=0)
    patterns = set()
    for xs in x.tolist():
        roots, order = {}, []
        for i in range(0, 3 * 9, 3):
            dest, src = xs[i], xs[i + 2]
            roots[dest] = dest if src >= 32 else roots[src]
            order.append(roots[dest])
        patterns.add(tuple(sorted(set(order), key=order.index).index(r) for r in order))
    # 9! / (3!)^3 = 1680 interleavings of three 3-statement chains: many occur, not one fixed pattern
    assert len(patterns) > 100


def test_determinism_and_disjoint_streams():
    cfg = VtTask(vocab_size=64, seq_len=64, chains=3, hops=(1, 2))
    a, b = make_vt(cfg, 16, seed=5), make_vt(cfg, 16, seed=5)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(make_vt(cfg, 16, seed=6)[0], a[0])
    train = {tuple(r) for r in make_vt(cfg, 300, seed=5, split="train")[0].tolist()}
    test = {tuple(r) for r in make_vt(cfg, 300, seed=5, split="test")[0].tolist()}
    assert len(train) == len(test) == 300 and not train & test
    big = make_vt(cfg, 1030, seed=1)  # past the 1024-row chunk: still valid, and not a repeat of the first chunk
    _check_instances(cfg, big[0][1020:], big[1][1020:])
    assert not torch.equal(big[0][1024:1030], big[0][:6])
    with pytest.raises(ConfigError, match=r"2\*\*31"):
        make_vt(cfg, 1, seed=2**31)
    with pytest.raises(ConfigError, match="split must be 'train' or 'test'"):
        make_vt(cfg, 1, seed=0, split="val")


def _row(tokens: list[int], answers: dict[int, int], L: int = 24) -> tuple[list[int], list[int]]:
    xs = tokens + [FILLER] * (L - len(tokens))
    ys = [answers.get(i, IGNORE) for i in range(L)]
    return xs, ys


def test_baselines_on_hand_made_instances():
    V = 32  # variables [3, 16), values [16, 32)
    # chains: a(3)=20, b(4)=a ; c(5)=21 ; queries: ? b -> 20, ? c -> 21
    x1, y1 = _row([3, ASSIGN, 20, 5, ASSIGN, 21, 4, ASSIGN, 3, QUERY, 4, QUERY, 5], {10: 20, 12: 21})
    # the same chains, values given in the other order and the queries in value order
    x2, y2 = _row([5, ASSIGN, 21, 3, ASSIGN, 20, 4, ASSIGN, 3, QUERY, 5, QUERY, 4], {10: 21, 12: 20})
    b = vt_baselines(torch.tensor([x1, x2]), torch.tensor([y1, y2]), V)
    assert b["uniform"] == pytest.approx(1 / 16)
    assert b["copy_any"] == pytest.approx(0.5)  # two values in each context
    # the latest value is 21 in row 1 (right for the 2nd query), 20 in row 2 (right for the 2nd query)
    assert b["recent_value"] == pytest.approx(0.5)
    assert set(b) == {"uniform", "copy_any", "recent_value"}
    # row 1: queries ask 20 then 21, values came 20, 21: both right; row 2: 21 then 20, came 21, 20: both right
    assert order_leak(torch.tensor([x1, x2]), torch.tensor([y1, y2]), V) == pytest.approx(1.0)
    # a row without queries is left out; none at all is refused
    x3, y3 = _row([3, ASSIGN, 20], {})
    assert vt_baselines(torch.tensor([x1, x3]), torch.tensor([y1, y3]), V)["recent_value"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="nothing to score"):
        vt_baselines(torch.tensor([x3]), torch.tensor([y3]), V)


def test_accuracy_by_hop_splits_hits_by_the_lookups_each_query_needs():
    V = 32
    x1, y1 = _row([3, ASSIGN, 20, 5, ASSIGN, 21, 4, ASSIGN, 3, QUERY, 4, QUERY, 5], {10: 20, 12: 21})  # ? b: 1 hop, ? c: 0
    x2, y2 = _row([5, ASSIGN, 21, 3, ASSIGN, 20, 4, ASSIGN, 3, QUERY, 5, QUERY, 4], {10: 21, 12: 20})  # ? c: 0, ? b: 1
    x, y = torch.tensor([x1, x2]), torch.tensor([y1, y2])
    hits = torch.zeros_like(y, dtype=torch.bool)
    hits[0, 10] = hits[0, 12] = hits[1, 10] = True  # row 2's 1-hop query wrong
    out = accuracy_by_hop(hits, x, y, V)
    assert out == {"0": {"acc": 1.0, "n": 2, "baseline": 0.5, "baseline_name": "copy_any"},
                   "1": {"acc": 0.5, "n": 2, "baseline": 0.5, "baseline_name": "copy_any"}}
    with pytest.raises(ValueError, match="shaped like labels"):
        accuracy_by_hop(hits[:1], x, y, V)


def test_accuracy_by_hop_of_generated_instances_counts_every_query_once():
    cfg = VtTask(vocab_size=128, seq_len=96, chains=4, hops=(0, 3))
    x, y = make_vt(cfg, 64, seed=3)
    # a model that chains at most one hop: right wherever the query is 0 or 1 hops from its value
    traced = trace_answers(x, y, cfg.vocab_size)
    hits = torch.zeros_like(y, dtype=torch.bool)
    for i, row in enumerate(traced):
        qs = (y[i] != IGNORE).nonzero().flatten().tolist()
        for q, (_, _, h) in zip(qs, row):
            hits[i, q] = h <= 1
    out = accuracy_by_hop(hits, x, y, cfg.vocab_size)
    assert set(out) == {"0", "1", "2", "3"} and sum(v["n"] for v in out.values()) == 64 * 4
    assert [out[h]["acc"] for h in "0123"] == [1.0, 1.0, 0.0, 0.0]
    # copy-any is 1/4 at every hop (every value precedes the queries); the latest value statement belongs to a 0-hop
    # chain more often than 1/4 (a longer chain states its value first), so 0-hop queries have a stronger baseline
    assert all(v["baseline"] >= 0.25 for v in out.values())
    assert out["0"]["baseline_name"] == "recent_value" and out["0"]["baseline"] > 0.35
    assert [out[h]["baseline_name"] for h in "23"] == ["copy_any"] * 2


def test_generated_queries_leak_no_order_and_the_baselines_are_one_over_c():
    cfg = VtTask(vocab_size=128, seq_len=96, chains=4, hops=(1, 3))
    x, y = make_vt(cfg, 2000, seed=0)
    b = vt_baselines(x, y, cfg.vocab_size)
    assert b == pytest.approx({"uniform": 1 / 64, "copy_any": 0.25, "recent_value": 0.25})  # exact: each chain asked once
    assert abs(order_leak(x, y, cfg.vocab_size) - 0.25) < 0.02  # chance only: the query order tells nothing


@pytest.mark.parametrize(("data", "message"), [
    ({"task": "vtt"}, r"score.mqar.task='vtt' is not allowed. Did you mean: vt\? Allowed: mqar, vt"),
    ({"task": "vt", "vt": {"hops": -1}}, r"score.mqar.vt.hops=-1 is not allowed; allowed: an integer from 0 to 64, or a range"),
    ({"task": "vt", "vt": {"hops": [3, 1]}}, r"score.mqar.vt.hops=\[3, 1\] is not allowed"),
    ({"task": "vt", "vt": {"hops": [1, 2, 3]}}, r"score.mqar.vt.hops=\[1, 2, 3\] is not allowed"),
    ({"vt": {"hops": 1.5}}, r"score.mqar.vt.hops is"),
    ({"vt": {"query": "lats"}}, r"score.mqar.vt.query='lats' is not allowed. Did you mean: last\? Allowed: last, any"),
    ({"vt": {"chains": 0}}, r"score.mqar.vt.chains=0 is not allowed; allowed: an integer >= 1"),
    ({"vt": {"chain": 2}}, r"unknown score.mqar.vt key 'chain'. Did you mean: chains\?"),
    ({"task": "vt", "seq_len": 32, "vt": {"chains": 4, "hops": 2}},
     r"score.mqar \(task vt, seq_len 32, vocab 256\): VT with 4 chains of up to 2 hops needs seq_len >= 44"),
    ({"task": "vt", "vocab": 16, "seq_len": 64, "vt": {"chains": 4, "hops": 2}},
     r"needs 12 variable names and 4 values; vocab_size=16 holds 5 and 8"),
])
def test_bad_vt_settings_are_one_line_errors_naming_what_is_allowed(data, message):
    with pytest.raises(ConfigError, match=message) as e:
        ScoreConfig.from_dict({"mqar": data})
    assert "\n" not in str(e.value)


def test_old_stored_settings_read_back_as_mqar_and_new_ones_record_the_task():
    old = ScoreConfig.from_dict(yaml_load("mqar: {seq_len: 64, kv_pairs: 8, vocab: 64}"))
    assert old.mqar.task == "mqar" and recall_task(old.mqar).num_kv_pairs == 8
    new = ScoreConfig.from_dict(yaml_load("mqar: {seq_len: 64, vocab: 64, task: vt, vt: {chains: 3, hops: [1, 3]}}"))
    d = new.to_dict()["mqar"]
    assert d["task"] == "vt" and d["vt"] == {"chains": 3, "hops": [1, 3], "query": "last", "curriculum_steps": 0,
                                             "curriculum": "shortest"}
    assert ScoreConfig.from_dict(new.to_dict()) == new
    task = recall_task(new.mqar)
    assert isinstance(task, VtTask) and task.hop_range == (1, 3) and task.chains == 3


def test_a_space_chooses_the_task_and_an_old_stored_space_is_the_same_space(tmp_path):
    from hlnas.space import load_space, space_from_dict

    space = load_space("tiny")
    stored = space.to_dict()
    del stored["scale"]["score"]["mqar"]["task"], stored["scale"]["score"]["mqar"]["vt"]  # as stored before VT
    back = space_from_dict(stored, where="test")
    assert back.score.mqar.task == "mqar" and back.fingerprint() == space.fingerprint()
    vt = space.with_sets(["score.mqar.task=vt", "score.mqar.vt.hops=[1, 2]", "score.mqar.vt.chains=2"])
    assert vt.score.mqar.task == "vt" and vt.score.mqar.vt.hops == (1, 2) and vt.fingerprint() != space.fingerprint()
    stored_vt = vt.to_dict()
    del stored_vt["scale"]["score"]["mqar"]["vt"]["curriculum"]  # a VT space stored before the staged curriculum
    assert space_from_dict(stored_vt, where="test").fingerprint() == vt.fingerprint()
    with pytest.raises(HlnasError, match="score.mqar.task='vtt' is not allowed"):
        space.with_sets(["score.mqar.task=vtt"])


@pytest.mark.slow
def test_a_fresh_model_learns_variable_tracking_above_its_baseline():
    """End to end on CPU (about 20 s): a 2-layer attention model, zero init and input convolutions as the H200
    protocol, three chains of 0 or 1 hops (one or two lookups). It leaves the copy-any plateau (loss ln 3) within
    400 steps, where a model that knew only which values are in the context would stay."""
    cfg = MqarConfig(task="vt", vt={"chains": 3, "hops": [0, 1]}, seq_len=24, vocab=32, batch=32, steps=400, eval_every=100,
                     test=128, val=128, lr=3e-3, model={"d_model": 64, "n_heads": 2, "mlp_hidden": 128, "residual_init": "zero",
                                                        "mixer_hparams": {"attention": {"input_conv": 4}}})
    out = train_mqar(Layout.parse("AA"), preset("proxy-tiny"), cfg, seed=0, device="cpu")
    assert out["mqar"]["task"] == "vt" and out["mqar"]["vt"]["hops"] == [0, 1] and "kv_pairs" not in out["mqar"]
    assert out["mqar_baseline"] == pytest.approx(1 / 3) and out["mqar_baselines"]["uniform"] == pytest.approx(1 / 16)
    curve = out["mqar"]["runs"][0]["curve"]
    assert [c[0] for c in curve] == [100, 200, 300, 400]
    assert curve[-1][2] < min(curve[0][2] - 0.5, math.log(3))  # below the copy-any plateau: some association learned
    assert out["mqar_acc"] > out["mqar_baseline"] + 0.05, out
    assert 0 < out["mqar_auc"] < 1
    by_hop = out["mqar_by_hop"]  # every example has 3 queries: the per-hop accuracies weighted by n are the total
    assert set(by_hop) == {"0", "1"} and sum(v["n"] for v in by_hop.values()) == 128 * 3
    assert sum(v["acc"] * v["n"] for v in by_hop.values()) / (128 * 3) == pytest.approx(out["mqar_acc"], abs=1e-3)
    from hlnas.recall.baselines import recall_metrics  # the study's recall and recall_auc read it unchanged

    rm = recall_metrics(out)
    assert rm["recall_source"] == "mqar_acc" and rm["recall_auc"] == out["mqar_auc"] and rm["recall"] > 0


def _stored_space(db, study_name: str):
    """The space a study of the committed GPU database was run with, as it stored it (the probe spaces' files are gone;
    their studies keep them)."""
    import optuna

    from hlnas.space import space_from_dict

    study = optuna.load_study(study_name=study_name, storage=f"sqlite:///{db}")
    return study, space_from_dict(study.user_attrs["hlnas_space"], where=f"study {study_name!r}")


def _grid_db(tmp_path):
    """A copy of the committed GPU database (loading may write; the committed one stays as it is)."""
    import pathlib
    import shutil

    db = tmp_path / "h200.db"
    shutil.copy(pathlib.Path(__file__).parents[2] / "experiments" / "paper_grid" / "results" / "h200_2026-12-05f.db", db)
    return db


def test_the_stored_vt_space_leaves_its_whole_hop_range_most_of_the_step_budget(tmp_path):
    """The GPU study paper_grid_h200_vt's space: VT with a staged curriculum whose stages end by half the step budget
    (the whole range, which validation and test score, gets the rest), and whose calibration ladder holds pure, 6:1,
    3:1."""
    import hlnas.calibration.protocol as calib

    _, space = _stored_space(_grid_db(tmp_path), "paper_grid_h200_vt")
    mq = space.score.mqar
    assert space.name == "paper_grid_h200_vt" and mq.task == "vt" and mq.vt.curriculum == "staged"
    task = recall_task(mq)
    lo, hi = task.hop_range
    assert hi > lo and mq.vt.train_task(task, (hi - lo) * mq.vt.curriculum_steps) is task
    assert (hi - lo) * mq.vt.curriculum_steps <= mq.steps // 2
    assert {r.ratio for r in calib.plan(space)} >= {"pure", "6:1", "3:1"}
    fake = {"kinds": ["control", "graded"]}
    assert f"score.mqar.vt.hops (now [{lo}, {hi}])" in calib.advice(space, fake) and "kv_pairs" not in calib.advice(space, fake)


def test_the_curriculum_trains_the_shortest_chains_first_and_a_resumed_stream_is_the_same():
    from hlnas.recall.proxy import mqar_train_batches, recall_setup

    task = VtTask(vocab_size=64, seq_len=44, chains=4, hops=(0, 2))
    hops_of = lambda x, y: {h for row in trace_answers(x, y, 64) for _, _, h in row}  # noqa: E731
    shortest = VtConfig(chains=4, hops=(0, 2), curriculum_steps=100)
    stream = mqar_train_batches(task, 8, seed=3, task_at=lambda s: shortest.train_task(task, s))  # blocks of 64 steps: 0-127 easy
    batches = [next(stream) for _ in range(192)]
    assert all(hops_of(*b) == {0} for b in batches[:128])
    late = (torch.cat([b[0] for b in batches[128:]]), torch.cat([b[1] for b in batches[128:]]))
    assert hops_of(*late) == {0, 1, 2}
    plain = mqar_train_batches(task, 8, seed=3)  # without it: the range from the start, the same seeds per block
    assert len(hops_of(*next(plain))) > 1
    resumed = mqar_train_batches(task, 8, seed=3, start=100, task_at=lambda s: shortest.train_task(task, s))  # a paused run
    # continues the same stream
    for b in batches[100:150]:
        x, y = next(resumed)
        assert torch.equal(x, b[0]) and torch.equal(y, b[1])
    # the setting reaches the stream through the recall setup, and is refused where it makes no sense
    cfg = MqarConfig(task="vt", vt={"chains": 4, "hops": [0, 2], "curriculum_steps": 64}, seq_len=44, vocab=64, batch=8)
    setup = recall_setup(Layout.parse("A"), preset("proxy-tiny"), cfg)
    assert hops_of(*next(setup.train_batches(seed=0))) == {0}
    assert cfg.to_dict()["vt"]["curriculum_steps"] == 64 and MqarConfig().vt.curriculum_steps == 0
    with pytest.raises(ConfigError, match=r"score.mqar.vt.curriculum_steps=-1 is not allowed; allowed: an integer >= 0"):
        MqarConfig(task="vt", vt={"chains": 4, "hops": [0, 2], "curriculum_steps": -1}, seq_len=44, vocab=64)


def test_the_staged_curriculum_adds_one_hop_a_stage_and_resumes_the_same_stream():
    from hlnas.recall.proxy import recall_setup

    task = VtTask(vocab_size=64, seq_len=60, chains=3, hops=(1, 3))
    staged = VtConfig(chains=3, hops=(1, 3), curriculum_steps=64, curriculum="staged")
    assert [staged.train_task(task, s).hop_range for s in (0, 63, 64, 127, 128, 10_000)] == [
        (1, 1), (1, 1), (1, 2), (1, 2), (1, 3), (1, 3)]
    assert staged.train_task(task, 128) is task  # the whole range: the task itself, as without a curriculum
    hops_of = lambda x, y: {h for row in trace_answers(x, y, 64) for _, _, h in row}  # noqa: E731
    cfg = MqarConfig(task="vt", vt={"chains": 3, "hops": [1, 3], "curriculum_steps": 64, "curriculum": "staged"},
                     seq_len=60, vocab=64, batch=8)
    setup = recall_setup(Layout.parse("A"), preset("proxy-tiny"), cfg)
    batches = [next(b) for b in [setup.train_batches(seed=1)] for _ in range(192)]
    stage = lambda part: hops_of(torch.cat([b[0] for b in part]), torch.cat([b[1] for b in part]))  # noqa: E731
    assert [stage(batches[:64]), stage(batches[64:128]), stage(batches[128:])] == [{1}, {1, 2}, {1, 2, 3}]
    resumed = setup.train_batches(seed=1, start=70)
    for b in batches[70:140]:
        x, y = next(resumed)
        assert torch.equal(x, b[0]) and torch.equal(y, b[1])
    assert cfg.to_dict()["vt"]["curriculum"] == "staged" and MqarConfig(task="vt").vt.curriculum == "shortest"
    with pytest.raises(ConfigError, match=r"score.mqar.vt.curriculum='stagd' is not allowed. Did you mean: staged\? "
                                          r"Allowed: shortest, staged"):
        MqarConfig(task="vt", vt={"curriculum": "stagd"})


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("task", ["vt", "mqar"])
def test_a_recall_run_on_the_gpu_scores_its_checks_and_test_set(task):
    """The path CPU tests never take: validation instances on the GPU, hits on the CPU (a device mismatch in
    hits_accuracy failed every H200 run of 2026-12-02 at its first check)."""
    extra = {"vt": {"chains": 3, "hops": [0, 1], "curriculum_steps": 64}} if task == "vt" else {"kv_pairs": 4}
    cfg = MqarConfig(task=task, seq_len=32, vocab=32, batch=16, steps=128, eval_every=64, test=64, val=64, lr=3e-3,
                     model={"d_model": 64, "n_heads": 2, "mlp_hidden": 128, "residual_init": "zero"}, **extra)
    out = train_mqar(Layout.parse("AA"), preset("proxy-tiny"), cfg, seed=0, device="cuda")
    assert [c[0] for c in out["mqar"]["runs"][0]["curve"]] == [64, 128]
    assert 0.0 <= out["mqar_acc"] <= 1.0 and out["mqar_baseline"] > 0
    assert ("mqar_by_hop" in out) == (task == "vt")


def test_a_vt_control_that_does_one_lookup_and_never_chains_is_told_to_try_split2(tmp_path):
    """The GPU calibration of paper_grid_h200_vt_shift (committed study database): its control learned every 0-hop
    query and no 1-hop one. The advice names that and the split2 start; a space that already has split2, or a control
    that did not learn its 0-hop queries, gets no such line."""
    import hlnas.calibration.protocol as calib

    db = _grid_db(tmp_path)
    study, shift2 = _stored_space(db, "paper_grid_h200_vt_shift")
    runs = study.user_attrs["hlnas_calibration"]["runs"]
    result = calib.verdict(shift2, runs)
    assert not result["valid"] and "control" in result["kinds"]
    tip = calib.advice(shift2, result)
    assert re.search(r"the control learned the 0-hop queries \(1\.000\) and not the 1-hop ones \(0\.0\d\d \[0\.062\]\)",
                     tip), tip
    assert "input_conv_init: split2}, now {'input_conv': 4, 'input_conv_init': 'shift2'}" in tip
    _, split2 = _stored_space(db, "paper_grid_h200_vt_split")
    assert "0-hop" not in calib.advice(split2, calib.verdict(split2, runs))  # it has the start already
    unlearned = {k: {**r, "mqar_by_hop": {h: {**v, "acc": 0.06} for h, v in r["mqar_by_hop"].items()}}
                 for k, r in runs.items() if r.get("mqar_by_hop")}
    assert "0-hop" not in calib.advice(shift2, calib.verdict(shift2, unlearned))
