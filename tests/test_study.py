"""The search loop (hlnas.search.study) on real trials: storages, failures, dedupe, constraints, recovery.

Every study here trains real tiny candidates (proxy-tiny, 4 layers, 1-2 k tokens, a few MQAR steps:
about a second a trial on 2 CPU cores). Failures are injected by wrapping ``hlnas.lm.trainer.train``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time

import optuna
import pytest
import torch
from optuna.trial import TrialState

import hlnas.lm.trainer
from hlnas.errors import HlnasError
from hlnas.space import space_from_dict
from hlnas.search.study import StorageError, front_rows, load_hlnas_study, open_or_create_storage, run_search
from hlnas.search.options import SearchOptions
from tests.searches import storage_url, tiny_raw, tiny_space, trained

optuna.logging.set_verbosity(optuna.logging.WARNING)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def train_calls(monkeypatch):
    """Record the layout of every real training run (run_trial imports hlnas.lm.trainer.train at call time)."""
    calls: list[str] = []
    real = hlnas.lm.trainer.train

    def spy(layout, *a, **k):
        calls.append(str(layout))
        return real(layout, *a, **k)

    monkeypatch.setattr(hlnas.lm.trainer, "train", spy)
    return calls


@pytest.mark.parametrize("kind", ["sqlite", "journal", "postgresql"])
def test_same_search_on_every_storage_then_resume(kind, tmp_path, request):
    url = storage_url(kind, tmp_path, request)
    space = tiny_space()
    name = f"s-{kind}-{os.getpid()}"
    run_search(space, SearchOptions(storage=url, study_name=name, n_trials=3))

    study = load_hlnas_study(url, name)  # a fresh handle: everything below comes back from the storage
    done = trained(study)
    assert len(done) == 3 and len({t.user_attrs["layout"] for t in done}) == 3
    for t in done:
        a = t.user_attrs
        assert a["status"] == "ok" and a["layout"] in {str(space.layout(p)) for p in space.grid()}
        assert t.values == [a["recall"], a["kv_cache_bytes"]]  # objectives: recall (MQAR), KV-cache bytes
        assert math.isfinite(a["val_loss"]) and 0 <= a["mqar_acc"] <= 1 and a["params"] > 0
        assert a["worker_pid"] == os.getpid() and a["started_at"] <= a["finished_at"]
        assert a["device_name"] == "cpu"  # the card a run trained on (its GPU's model on CUDA: GPU-seconds differ by card)
    attrs = study.user_attrs
    assert attrs["hlnas_space"] == space.to_dict() and attrs["hlnas_space_hash"] == space.fingerprint()
    assert attrs["hlnas_version"] == hlnas.__version__ and attrs["hlnas_trials"] == 3
    assert [o["metric"] for o in attrs["hlnas_objectives"]] == ["recall", "kv_cache_bytes"]
    assert attrs["hlnas_space"]["scale"]["train"]["tokens"] == 1024  # the training config travels with the study
    assert {r["layout"] for r in front_rows(study)} <= {t.user_attrs["layout"] for t in done}

    # resume needs only storage + name: the space comes from the study; the 4th layout gets trained
    run_search(None, SearchOptions(storage=url, study_name=name, n_trials=4, resume=True))
    done = trained(load_hlnas_study(url, name))
    assert len(done) == 4 and len({t.user_attrs["layout"] for t in done}) == 4


def test_a_sqlite_write_waits_out_another_connections_lock(tmp_path, monkeypatch):
    """A dashboard or a second process can hold SQLite's lock; sqlite's own 5 s default then failed the search's
    write with "database is locked" (seen in CI while a test polled the study)."""
    import sqlite3
    import threading

    import hlnas.search.storage as S

    monkeypatch.setattr(S, "SQLITE_BUSY_TIMEOUT_S", 30.0)
    path = tmp_path / "busy.db"
    study = optuna.create_study(study_name="busy", storage=S.open_storage(f"sqlite:///{path}", create=True))
    locked, hold = threading.Event(), 6.0  # longer than sqlite's default busy timeout of 5 s

    def lock_it():
        con = sqlite3.connect(path, timeout=0)
        con.execute("BEGIN EXCLUSIVE")
        locked.set()
        time.sleep(hold)
        con.commit()
        con.close()

    th = threading.Thread(target=lock_it)
    th.start()
    locked.wait(10)
    t0 = time.monotonic()
    study = optuna.load_study(study_name="busy", storage=S.open_storage(f"sqlite:///{path}"))
    study.set_user_attr("written", True)  # waits for the lock instead of raising
    th.join()
    assert time.monotonic() - t0 > 4.0 and study.user_attrs["written"] is True


@pytest.mark.parametrize("url, needle", [
    ("hlnas.db", "is not a URL"),
    ("redis://localhost/0", "scheme 'redis' is not allowed; allowed schemes: sqlite, postgresql, mysql, journal"),
    ("sqlite:///{tmp}/no/such/folder/x.db", "does not exist"),
    ("journal://", "names no file"),
    ("postgresql+psycopg2://nobody@127.0.0.1:1/nothing", "cannot open storage"),
])
def test_wrong_storage_url_is_a_clear_storage_error(url, needle, tmp_path):
    url = url.replace("{tmp}", str(tmp_path))
    with pytest.raises(StorageError) as e:
        open_or_create_storage(url)
    assert needle in str(e.value) and isinstance(e.value, HlnasError)
    with pytest.raises(StorageError):
        run_search(tiny_space(), SearchOptions(storage=url, study_name="x", n_trials=1))


def test_failing_trials_are_recorded_and_the_study_goes_on(tmp_path, monkeypatch):
    """An exception, a NaN loss and a CUDA OOM each become a FAIL trial with its reason; the rest completes."""
    real = hlnas.lm.trainer.train
    calls = []

    def flaky(layout, model_cfg, tcfg, *a, **k):
        s = str(layout)
        calls.append(s)
        if s == "GGGG":
            raise RuntimeError("boom: a kernel exploded")
        if s == "GAGA":  # a learning rate that really diverges
            return real(layout, model_cfg, dataclasses.replace(tcfg, lr=1e30, grad_clip=0.0), *a, **k)
        if s == "AAAA":
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(layout, model_cfg, tcfg, *a, **k)

    monkeypatch.setattr(hlnas.lm.trainer, "train", flaky)
    url = f"sqlite:///{tmp_path}/f.db"
    run_search(tiny_space(), SearchOptions(storage=url, study_name="f", n_trials=4))
    study = load_hlnas_study(url, "f")
    by_layout = {t.user_attrs["layout"]: t for t in study.trials}
    expect = {"GGGG": ("failed", "other", "boom: a kernel exploded"), "GAGA": ("failed", "nan", "loss became nan"),
              "AAAA": ("infeasible", "oom", "out of memory")}
    for layout, (status, kind, text) in expect.items():
        t = by_layout[layout]
        assert t.state == TrialState.FAIL and t.values is None
        assert (t.user_attrs["status"], t.user_attrs["error_kind"]) == (status, kind)
        assert text in t.user_attrs["error"]
    ok = by_layout["GGGA"]
    assert ok.state == TrialState.COMPLETE and ok.user_attrs["status"] == "ok" and len(ok.values) == 2
    assert sorted(calls) == sorted(by_layout) and len(calls) == 4  # each layout trained once, failures not retried

    # a resume keeps everything and does not retrain the failed layouts (they would fail again)
    run_search(None, SearchOptions(storage=url, study_name="f", n_trials=4, resume=True))
    assert len(calls) == 4
    again = load_hlnas_study(url, "f")
    assert [t.state for t in again.trials[:4]] == [t.state for t in study.trials[:4]]
    assert again.trials[by_layout["GGGA"].number].values == ok.values


def test_a_layout_is_never_trained_twice(tmp_path, train_calls):
    """Placements of 'pure' all build one layout; a random sampler proposes it again and again."""
    space = tiny_space(ratios=["pure", "2:1"], placements=["paper", "front", "back"], sampler="random")
    layouts = {str(space.layout(p)) for p in space.grid()}
    assert layouts == {"GGGG", "GAGA", "AAGG", "GGAA", "AAAA"}
    url = f"sqlite:///{tmp_path}/d.db"
    run_search(space, SearchOptions(storage=url, study_name="d", n_trials=len(layouts), seed=3))
    study = load_hlnas_study(url, "d")
    assert sorted(train_calls) == sorted(layouts)  # every layout trained, none twice
    done = trained(study)
    assert sorted(t.user_attrs["layout"] for t in done) == sorted(layouts)
    copies = [t for t in study.trials if "reused_from" in t.user_attrs]
    assert copies, "the sampler proposed no duplicate: the test space is too large"
    for t in copies:
        src = study.trials[t.user_attrs["reused_from"]]
        assert src.user_attrs["layout"] == t.user_attrs["layout"] and "reused_from" not in src.user_attrs
        assert t.state == TrialState.COMPLETE and t.values == src.values
    assert len({r["layout"] for r in front_rows(study)}) == len(front_rows(study))  # copies not listed twice


def test_constraints_record_infeasible_layouts_without_training(tmp_path, train_calls):
    """max_kv_bytes below the Transformer's KV cache: it is recorded infeasible and never trained."""
    space = tiny_space()
    from hlnas.model.cost import layout_metrics

    spec_kv = {str(space.layout(p)): layout_metrics(str(space.layout(p)), space.model, 256)["kv_cache_bytes"]
               for p in space.grid()}
    limit = (spec_kv["AAAA"] + spec_kv["GAGA"]) / 2  # excludes only the Transformer
    space = tiny_space(constraints={"max_kv_bytes": limit})
    url = f"sqlite:///{tmp_path}/c.db"
    run_search(space, SearchOptions(storage=url, study_name="c", n_trials=4))
    study = load_hlnas_study(url, "c")
    assert "AAAA" not in train_calls and sorted(train_calls) == ["GAGA", "GGGA", "GGGG"]
    bad = [t for t in study.trials if t.user_attrs["layout"] == "AAAA"]
    assert len(bad) == 1 and bad[0].state == TrialState.FAIL
    a = bad[0].user_attrs
    assert (a["status"], a["error_kind"]) == ("infeasible", "constraint") and "max_kv_bytes" in a["error"]
    assert "train_wall_s" not in a and bad[0].constraints["max_kv_bytes"] > 0
    for t in trained(study):
        assert t.constraints["max_kv_bytes"] <= 0
    assert "AAAA" not in {r["layout"] for r in front_rows(study)}


def test_running_trials_of_a_dead_driver_are_failed_and_requeued(tmp_path):
    url = f"sqlite:///{tmp_path}/r.db"
    space = tiny_space(sampler="random")  # nothing pre-queued: the re-queued trial is the next one asked
    run_search(space, SearchOptions(storage=url, study_name="r", n_trials=1))
    # what a killed driver leaves behind: a trial RUNNING forever, its layout attrs already stored
    study = optuna.load_study(study_name="r", storage=url)
    first = study.trials[0].user_attrs["layout"]
    params = next(p for p in space.grid() if str(space.layout(p)) != first)
    study.enqueue_trial(params)
    orphan = study.ask({k: optuna.distributions.CategoricalDistribution(v) for k, v in space.params().items()})
    orphan.set_user_attr("layout", str(space.layout(params)))
    events = []
    run_search(None, SearchOptions(
        storage=url, study_name="r", n_trials=2, resume=True, on_event=lambda k, d: events.append((k, d))))

    study = load_hlnas_study(url, "r")
    dead = study.trials[orphan.number]
    assert dead.state == TrialState.FAIL and dead.user_attrs["error_kind"] == "interrupted"
    assert ("requeued", {"n": 1}) in events
    retry = [t for t in study.trials if t.user_attrs.get("requeued_from") == orphan.number]
    assert len(retry) == 1 and retry[0].state == TrialState.COMPLETE and retry[0].params == params
    assert len(trained(study)) == 2 and not study.get_trials(states=(TrialState.RUNNING, TrialState.WAITING))


def test_resume_with_a_changed_space_is_refused_with_the_differences(tmp_path):
    url = f"sqlite:///{tmp_path}/x.db"
    run_search(tiny_space(), SearchOptions(storage=url, study_name="x", n_trials=1))
    raw = tiny_raw(ratios=["pure", "2:1"])
    raw["scale"]["train"]["tokens"] = 2048
    with pytest.raises(HlnasError) as e:
        run_search(space_from_dict(raw), SearchOptions(storage=url, study_name="x", n_trials=2, resume=True))
    msg = str(e.value)
    assert "resuming with a changed space is refused" in msg
    assert "scale.train.tokens: 1024 -> 2048" in msg and "ratios: ['pure', '2:1', '4:1'] -> ['pure', '2:1']" in msg
    with pytest.raises(HlnasError, match="already exists.*--resume"):
        run_search(tiny_space(), SearchOptions(storage=url, study_name="x", n_trials=1))
    with pytest.raises(HlnasError, match="no study 'nope' to resume.*studies there: x"):
        run_search(None, SearchOptions(storage=url, study_name="nope", n_trials=1, resume=True))
    assert len(trained(load_hlnas_study(url, "x"))) == 1  # the refusal changed nothing



def test_retry_failed_trains_a_failed_layout_again_after_the_cause_is_fixed(tmp_path, monkeypatch):
    import hlnas.search.executors as executors
    from hlnas.search.trial import TrialResult, run_trial

    url, events = f"sqlite:///{tmp_path}/retry.db", []
    space = tiny_space()
    victim = str(space.layout(space.grid()[0]))

    def flaky(spec):  # the first layout hits a fault (say, a kernel bug later fixed); the rest train
        if spec.layout == victim:
            return TrialResult(spec.number, "failed", {"status": "failed", "error_kind": "cuda_error", "error": "CUDA error"},
                               "cuda_error", "CUDA error")
        return run_trial(spec)

    monkeypatch.setattr(executors, "run_trial", flaky)
    run_search(space, SearchOptions(storage=url, study_name="r", n_trials=3))
    study = load_hlnas_study(url, "r")
    assert victim not in {t.user_attrs["layout"] for t in trained(study)}
    run_search(None, SearchOptions(
        storage=url, study_name="r", n_trials=4, resume=True))  # a plain resume leaves it out
    assert victim not in {t.user_attrs["layout"] for t in trained(load_hlnas_study(url, "r"))}
    monkeypatch.setattr(executors, "run_trial", run_trial)  # the cause is fixed
    run_search(None, SearchOptions(
        storage=url, study_name="r", n_trials=4, resume=True, retry_failed=True,
        on_event=lambda k, d: events.append((k, d))))
    assert ("retry", {"number": 0, "layout": victim, "error_kind": "cuda_error"}) in events
    done = trained(load_hlnas_study(url, "r"))
    assert victim in {t.user_attrs["layout"] for t in done} and len(done) == 4


def test_ctrl_c_while_an_inline_trial_scores_stops_at_once_and_requeues_it(tmp_path, monkeypatch):
    """Outside training (model build, scoring) the trainer's checkpointing handler is not installed: the
    search's own handler must still stop the running inline trial at once, not after its scoring."""
    import signal
    import time

    import hlnas.score.objectives as objectives

    url = f"sqlite:///{tmp_path}/stop.db"
    real_score, calls = objectives.score, []

    def slow_score(*a, **k):  # the second trial is stopped while it scores; a long scoring would follow
        calls.append(1)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(60)
        return real_score(*a, **k)

    monkeypatch.setattr(objectives, "score", slow_score)
    callers = signal.getsignal(signal.SIGINT)  # Python's default, or SIG_IGN where the suite runs in the background
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_search(tiny_space(), SearchOptions(storage=url, study_name="s", n_trials=4))
    assert time.monotonic() - t0 < 50  # did not sit out the sleep
    assert signal.getsignal(signal.SIGINT) is callers  # the caller's handler is back
    ts = optuna.load_study(study_name="s", storage=url).get_trials()
    assert [t.state for t in ts[:2]] == [TrialState.COMPLETE, TrialState.FAIL]
    assert ts[1].user_attrs["error_kind"] == "interrupted"
    requeued = [t for t in ts if t.user_attrs.get("requeued_from") == 1]
    assert [t.state for t in requeued] == [TrialState.WAITING]
    assert requeued[0].system_attrs["fixed_params"] == ts[1].params  # a queued trial keeps its params here


def test_a_study_on_the_mqar_recall_protocol_ranks_by_the_mixed_in_recall(tmp_path, monkeypatch):
    """recall_format mqar: each trial trains with MQAR instances mixed into the corpus and its recall
    objective is the trained candidate's own held-out MQAR accuracy (training length and 2x)."""
    import hlnas.lm.recall_mix

    mixed, real = [], hlnas.lm.recall_mix.recall_documents

    def spy(train, *rest):
        docs = real(train, *rest)
        mixed.append(train.recall_format)
        return docs

    monkeypatch.setattr(hlnas.lm.recall_mix, "recall_documents", spy)
    raw = tiny_raw(ratios=["pure"], transformer=True)
    raw["scale"]["train"].update(recall_every=1, recall_count=4, recall_format="mqar", recall_length=16, recall_kv_pairs=2,
                                 recall_vocab=16)
    raw["scale"]["score"] = {"objectives": ["val_loss", "mqar_mixed"], "mqar": {"test": 16, "batch": 8}}
    raw["objectives"] = [{"name": "recall", "metric": "recall"}, {"name": "kv", "metric": "kv_cache_bytes"}]
    url = f"sqlite:///{tmp_path}/m.db"
    study = run_search(space_from_dict(raw), SearchOptions(storage=url, study_name="m", n_trials=2))
    done = trained(study)
    assert len(done) == 2 and mixed == ["mqar", "mqar"]
    for t in done:
        a = t.user_attrs
        assert set(a["mqar_mixed"]["by_length"]) == {"16", "32"} and "mqar_acc" not in a
        assert a["recall"] == a["mqar_mixed_acc"] == t.values[0]
        assert 0 <= a["recall"] <= 1
    # experiments/paper_grid/collect.py turns such a study into the grid CSV's rows
    from tests.helpers import paper_grid_script

    collect = paper_grid_script("collect")
    rows = {r["layout"]: r for r in collect.rows(study)}
    for t in done:
        r = rows[t.user_attrs["layout"]]
        assert r["status"] == "ok" and r["mqar_mixed_acc"] == t.user_attrs["mqar_mixed_acc"] == r["recall"]
        by = t.user_attrs["mqar_mixed"]["by_length"]
        assert r["mqar_mixed_by_length"] == f"16:{by['16']:.4f} 32:{by['32']:.4f}"


def test_stored_specs_carry_the_space_depth(tmp_path):
    """A 4-layer space's trial specs said n_layers 24 (the preset's) before the specs came from one builder."""
    from hlnas.search.records import layout_spec, trial_spec

    space = tiny_space()
    spec = trial_spec(space, 0, space.grid()[0])
    assert spec.recipe.model.n_layers == 4 == space.n_layers and spec.recipe.train == space.train
    assert layout_spec(space, -1, spec.layout, seed=1).recipe.train.seed == 1


def test_a_new_study_stores_whether_its_space_is_a_paper_grid_by_content():
    """Before, only a space named 'paper_grid' was stored as one: the H200 grids lost the paper overlay."""
    from hlnas.search.study import _study_attrs
    from hlnas.space import load_space

    assert _study_attrs(load_space("paper_grid_h200_lr"))["hlnas_paper_grid"] is True
    assert _study_attrs(load_space("placement"))["hlnas_paper_grid"] is False


def test_executor_choice(monkeypatch):
    from hlnas.search.study import choose_executor

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert choose_executor("auto", None) == ("processes", 2)  # the default main job: both cores, no Ray start-up
    assert choose_executor("auto", 1) == ("inline", 1)
    assert choose_executor("auto", 3)[0] in ("ray", "processes") and choose_executor("inline", 1) == ("inline", 1)
    assert choose_executor("auto", None, "127.0.0.1:6379") == ("ray", 1)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert choose_executor("auto", None) == ("inline", 1)


def test_trial_target_is_the_stored_one_on_resume_else_the_default(tmp_path):
    from hlnas.search.study import default_trials, trial_target

    space = tiny_space()
    url = f"sqlite:///{tmp_path}/s.db"
    study = optuna.create_study(study_name="s", storage=url)
    study.set_user_attr("hlnas_objectives", [])
    assert trial_target(space, url, "s", resume=True) == default_trials(space) == len(space.grid())  # none stored yet
    study.set_user_attr("hlnas_trials", 5)
    assert trial_target(None, url, "s", resume=True) == 5
    assert trial_target(space, url, "s", resume=False) == len(space.grid()) and trial_target(None, url, "s", False) == 12

def _flat_score(score: dict) -> dict:
    """A nested score section as hlnas wrote it before the sections: flat, prefixed keys."""
    from hlnas.score.objectives import LEGACY_KEYS

    old = {new: key for key, new in LEGACY_KEYS.items()}
    flat = {k: v for k, v in score.items() if not isinstance(v, dict)}
    for section, body in score.items():
        if isinstance(body, dict):
            flat.update({old[f"{section}.{k}"]: v for k, v in body.items()})
    return flat


def test_a_study_stored_with_flat_score_keys_resumes_against_the_space_written_nested(tmp_path):
    """Every study stored before the score sections has flat keys in its hlnas_space; resuming it with the same
    space written nested must not count as a changed space, and a real change must still be refused."""
    nested = tiny_raw()
    flat = tiny_raw()
    flat["scale"]["score"] = _flat_score(nested["scale"]["score"])
    assert "mqar_steps" in flat["scale"]["score"] and "mqar" not in flat["scale"]["score"]
    url = f"sqlite:///{tmp_path}/old.db"
    run_search(space_from_dict(flat), SearchOptions(storage=url, study_name="old", n_trials=1))
    study = optuna.load_study(study_name="old", storage=url)
    stored = study.user_attrs["hlnas_space"]
    stored["scale"]["score"] = flat["scale"]["score"]  # what hlnas stored before (the section as written)
    study.set_user_attr("hlnas_space", stored)

    run_search(space_from_dict(nested), SearchOptions(storage=url, study_name="old", n_trials=2, resume=True))
    assert len(trained(load_hlnas_study(url, "old"))) == 2
    changed = tiny_raw()
    changed["scale"]["score"]["mqar"]["steps"] = 6
    with pytest.raises(HlnasError) as e:
        run_search(space_from_dict(changed), SearchOptions(storage=url, study_name="old", n_trials=3, resume=True))
    assert "scale.score.mqar.steps: 5 -> 6" in str(e.value)


# The space a GPU study stored on its first day, as hlnas then wrote it: flat score keys (mqar_mixed_scales, mqar_test)
STORED_FLAT = {
    "name": "paper_grid_h200_mqar", "mixers": ["hgrn", "retnet", "gla", "hgrn2", "deltanet", "gated_deltanet"],
    "ratios": ["pure", "24:1", "12:1", "6:1", "3:1"], "placements": ["paper"], "attention_sets": [], "transformer": True,
    "layers": 24,
    "scale": {"preset": "proxy-gpu", "model": {"d_model": 256, "n_heads": 4, "target_params": 21000000},
              "train": {"tokens": 6553600, "seq_len": 1024, "batch_size": 16, "lr": 0.001, "beta2": 0.999,
                        "warmup_frac": 0.1, "min_lr_ratio": 0.0, "recall_every": 1, "recall_count": 120,
                        "recall_format": "mqar", "recall_length": 64, "recall_kv_pairs": 8, "recall_vocab": 64,
                        "val_batches": 16, "log_every": 50},
              "data": {"source": "synthetic"},
              "score": {"objectives": ["val_loss", "mqar_mixed"], "mqar_mixed_scales": [1, 2, 4], "mqar_test": 512,
                        "mqar_batch": 64},
              "kv_context": 4096},
    "objectives": [{"name": "recall", "metric": "recall", "direction": "maximize"},
                   {"name": "kv_cache", "metric": "kv_cache_bytes", "direction": "minimize"},
                   {"name": "val_loss", "metric": "val_loss", "direction": "minimize"}],
    "constraints": {}, "sampler": "grid"}


def test_a_space_stored_with_flat_score_keys_matches_the_same_space_written_nested():
    """A study stored with flat score keys (hlnas's first GPU studies) reads back as the space its file now writes with
    nested sections: the resume check's comparison finds no difference."""
    import copy

    nested = copy.deepcopy(STORED_FLAT)
    nested["scale"]["score"] = {"objectives": ["val_loss", "mqar_mixed"], "mqar_mixed": {"scales": [1, 2, 4]},
                                "mqar": {"test": 512, "batch": 64}}
    space = space_from_dict(nested, where="the nested file")
    written = space.to_dict()["scale"]["score"]
    assert "mqar_mixed" in written and "mqar_mixed_scales" not in written  # nested, as written now
    stored = space_from_dict(STORED_FLAT, where="study 'paper_grid_h200_mqar'")
    assert stored.score.mqar_mixed.scales == (1, 2, 4) and stored.score.mqar.test == 512
    assert stored.fingerprint() == space.fingerprint() and stored.diff(space) == []


def test_front_rows_carry_each_trials_kernel_fallbacks_and_none_for_old_trials():
    """front_rows reads a trial's recall-run kernel fallbacks from its stored ``mqar`` (what front_table lists); trials
    stored before the key existed read as none."""
    study = optuna.create_study(directions=["maximize", "minimize"])
    study.set_user_attr("hlnas_objectives", [{"name": "recall", "metric": "recall", "direction": "maximize"},
                                             {"name": "kv_cache_bytes", "metric": "kv_cache_bytes", "direction": "minimize"}])
    why = "using the PyTorch kernels on CUDA: fla cannot be imported: X"
    for n, (recall, kv, mqar) in enumerate([(0.9, 2, {"kernel_fallbacks": [why]}), (0.5, 1, {"steps": 10})]):
        study.add_trial(optuna.trial.create_trial(values=[recall, kv], user_attrs={
            "layout": f"L{n}", "recall": recall, "kv_cache_bytes": kv, "mqar": mqar}))
    assert {r["layout"]: r["kernel_fallbacks"] for r in front_rows(study)} == {"L0": [why], "L1": []}
