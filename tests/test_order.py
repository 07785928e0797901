"""Longest expected first (hlnas.search.order): the calibration's runs within a role, and a search whose target covers
every untried candidate, start the runs expected to train longest first; what is trained, and every result, is the
same as in any other order."""

from __future__ import annotations

from hlnas.search import executors
from hlnas.search.executors import InlineExecutor
from hlnas.search.order import expected_length, longest_first
from hlnas.search.study import run_search
from hlnas.search.options import SearchOptions
from hlnas.space import builtin_spaces, load_space, space_from_dict
from tests.searches import fake_trial, raw_space, trained


def test_the_default_space_ranks_little_attention_and_the_costlier_mixer_first():
    sp = load_space(builtin_spaces()["tiny"])
    order = longest_first(sp, [str(sp.layout(p)) for p in sp.grid()])
    # no attention (pure: they train the whole budget where the protocol separates), then one attention layer, then
    # two, then the Transformer; at equal attention HGRN-2 (the costlier step) before HGRN; equals keep their order
    assert order == ["NNNNNN", "HHHHHH", "NNNNNA", "ANNNNN", "HHHHHA", "AHHHHH", "NNANNA", "AANNNN", "HHAHHA", "AAHHHH",
                     "AAAAAA"]
    assert expected_length(sp, "NNNNNN") < expected_length(sp, "HHHHHH") < expected_length(sp, "AAAAAA")


def test_the_calibration_starts_controls_then_pure_models_then_hybrids_each_longest_first(monkeypatch, tmp_path):
    run, calls = fake_trial({})
    monkeypatch.setattr(executors, "run_trial", run)
    sp = space_from_dict(raw_space())
    run_search(sp, SearchOptions(
        storage=f"sqlite:///{tmp_path}/c.db", study_name="c", n_trials=5, calibrate=True, calibrate_only=True))
    started = [(c[1], c[2]) for c in calls]
    pure = sorted(["GGGGGG", "HHHHHH"], key=lambda lay: expected_length(sp, lay))
    hybrid = sorted(["GGAGGA", "HHAHHA"], key=lambda lay: expected_length(sp, lay))
    assert started == [("AAAAAA", 0), ("AAAAAA", 1), *[(lay, s) for lay in pure for s in (0, 1)],
                       *[(lay, s) for lay in hybrid for s in (0, 1)]]


def test_a_calibration_spread_over_calls_can_keep_the_spaces_mixer_order(monkeypatch, tmp_path):
    """calibration.order: listed (the H200 spaces: the mixers that decide soonest whether the protocol can pass are
    listed first) starts each role's runs in the space's mixer order; it is no part of the recall protocol."""
    from hlnas.search.calibration import protocol_differences

    run, calls = fake_trial({})
    monkeypatch.setattr(executors, "run_trial", run)
    raw = raw_space(mixers=["hgrn", "gla"], calibration={"order": "listed"})
    sp = space_from_dict(raw)
    listed = [lay for m in sp.mixers for lay in (str(sp.layout({"mixer": m, "ratio": "pure", "placement": "paper"})),)]
    assert listed != sorted(listed, key=lambda lay: expected_length(sp, lay))  # the two orders differ here
    run_search(sp, SearchOptions(
        storage=f"sqlite:///{tmp_path}/c.db", study_name="c", n_trials=5, calibrate=True, calibrate_only=True))
    started = [(c[1], c[2]) for c in calls]
    assert started[2:6] == [(lay, s) for s in (0, 1) for lay in listed]  # as the plan lists them: seed by seed
    assert protocol_differences(space_from_dict(raw_space(mixers=["hgrn", "gla"])), sp) == []


def test_pairs_decide_each_mixers_pure_below_before_the_next_mixer_and_a_resume_may_change_the_order(monkeypatch,
                                                                                                      tmp_path):
    """calibration.order: pairs with mixer_order: controls, then mixer by mixer (the named ones first) its pure model
    and hybrid seed by seed, then its ladder. A study started in one order resumes in another (the order is no part of
    the fingerprint), and the runs already stored are not trained again."""
    run, calls = fake_trial({})
    monkeypatch.setattr(executors, "run_trial", run)
    url = f"sqlite:///{tmp_path}/c.db"
    raw = raw_space(mixers=["hgrn", "gla"], calibration={"order": "pairs", "mixer_order": ["gla"],
                                                         "graded_ratios": ["6:1"]}, layers=12)
    sp = space_from_dict(raw)
    run_search(sp, SearchOptions(storage=url, study_name="c", n_trials=5, calibrate=True, calibrate_only=True))
    g, h = "GGGGGGGGGGGG", "HHHHHHHHHHHH"
    gh, hh, g6, h6 = "GGAGGAGGAGGA", "HHAHHAHHAHHA", "GGGGGAGGGGGA", "HHHHHAHHHHHA"
    assert [(c[1], c[2]) for c in calls] == [(12 * "A", 0), (12 * "A", 1), (g, 0), (gh, 0), (g, 1), (gh, 1), (g6, 0),
                                             (g6, 1), (h, 0), (hh, 0), (h, 1), (hh, 1), (h6, 0), (h6, 1)]
    other = space_from_dict(raw_space(mixers=["hgrn", "gla"], calibration={"graded_ratios": ["6:1"]}, layers=12))
    assert other.fingerprint() == sp.fingerprint() and other.calibration.order != sp.calibration.order
    calls.clear()
    run_search(other, SearchOptions(
        storage=url, study_name="c", n_trials=5, resume=True, calibrate=True, calibrate_only=True))
    assert calls == []  # every run stored: nothing trained again
    # started in the default order and stopped before any run, then resumed in pairs: the resume's order holds
    run_search(other, SearchOptions(
        storage=url, study_name="d", n_trials=5, calibrate=True, calibrate_only=True, time_limit=1e-9))
    assert calls == []
    run_search(sp, SearchOptions(
        storage=url, study_name="d", n_trials=5, resume=True, calibrate=True, calibrate_only=True))
    assert [(c[1], c[2]) for c in calls][:6] == [(12 * "A", 0), (12 * "A", 1), (g, 0), (gh, 0), (g, 1), (gh, 1)]
    assert other.fingerprint() != space_from_dict(raw_space(mixers=["hgrn", "gla"], layers=12)).fingerprint()


def test_a_bad_mixer_order_is_named():
    import pytest

    from hlnas.calibration.protocol import plan
    from hlnas.errors import HlnasError

    with pytest.raises(HlnasError, match=r"calibration.mixer_order: 'retnet' not among the space's mixers; allowed: "):
        plan(space_from_dict(raw_space(calibration={"mixer_order": ["retnet"]})))
    with pytest.raises(HlnasError, match=r"calibration.mixer_order=\['gla', 'gla'\] names a mixer twice"):
        space_from_dict(raw_space(calibration={"mixer_order": ["gla", "gla"]}))


def test_a_bad_calibration_order_is_named():
    import pytest

    from hlnas.errors import HlnasError

    with pytest.raises(HlnasError, match="calibration.order='random' is not allowed; allowed: longest"):
        space_from_dict(raw_space(calibration={"order": "random"}))


class _TwoAtOnce(InlineExecutor):
    """Trials answered in the calling process, two submitted before the loop collects: the order a 2-worker search
    starts them in, without processes."""

    capacity = 2


def _search(tmp_path, name: str, ex):
    events = []
    sp = space_from_dict(raw_space(sampler="nsga2", calibration={"enabled": False}))
    study = run_search(sp, SearchOptions(
        storage=f"sqlite:///{tmp_path}/{name}.db", study_name=name, n_trials=len(sp.grid()), executor=ex,
        on_event=lambda k, d: events.append((k, d))))
    return sp, study, events


def test_a_search_covering_every_candidate_starts_them_longest_first_with_the_same_results(monkeypatch, tmp_path):
    run, calls = fake_trial({})
    sp, study, events = _search(tmp_path, "two", _TwoAtOnce(run))
    started = [d["layout"] for k, d in events if k == "started"]
    assert started == longest_first(sp, [str(sp.layout(p)) for p in sp.grid()])  # every candidate, longest first
    assert [k for k, _ in events].count("longest_first") == 1
    assert not any(k == "reused" for k, _ in events)  # no repeat proposal was asked on the way
    assert len(study.get_trials(deepcopy=False)) == len(sp.grid())

    # one trial at a time (the sampler benchmark's case too): the sampler's own order, repeats and all
    run1, _ = fake_trial({})
    _, study1, events1 = _search(tmp_path, "one", InlineExecutor(run1))
    assert not any(k == "longest_first" for k, _ in events1)
    # the same layouts trained, with the same results, whichever order they started in
    by_layout = {t.user_attrs["layout"]: t.values for t in trained(study)}
    assert by_layout == {t.user_attrs["layout"]: t.values for t in trained(study1)}


def test_a_target_short_of_the_untried_candidates_leaves_the_order_to_the_sampler(monkeypatch, tmp_path):
    run, _ = fake_trial({})
    events = []
    sp = space_from_dict(raw_space(sampler="nsga2", calibration={"enabled": False}))
    run_search(sp, SearchOptions(
        storage=f"sqlite:///{tmp_path}/s.db", study_name="s", n_trials=len(sp.grid()) - 1, executor=_TwoAtOnce(run),
        on_event=lambda k, d: events.append((k, d))))
    assert not any(k == "longest_first" for k, _ in events)
    assert len([k for k, _ in events if k == "started"]) == len(sp.grid()) - 1
