"""One metric table: every consumer reads it, so directions and titles cannot disagree."""

import pytest

import hlnas.metrics as metric_table
from hlnas.errors import ConfigError
from hlnas.analysis.figure_style import _TITLES, format_metric
from hlnas.analysis.pareto import METRIC_DIRECTIONS
from hlnas.space import OBJECTIVE_DIRECTIONS, RAW_RECALL_METRICS, load_space


def test_every_consumer_reads_the_one_table():
    table = metric_table.directions()
    assert METRIC_DIRECTIONS == table
    assert all(OBJECTIVE_DIRECTIONS[name] == table[name] for name in OBJECTIVE_DIRECTIONS)  # the space's objective view
    assert set(RAW_RECALL_METRICS) == {"recall_raw", "ruler", "ruler_avg", "mqar_acc", "mqar_mixed_acc"}
    assert set(_TITLES) == set(table)
    # what the search records: the directions the old tables lacked are there
    for name in ("mqar_mixed_acc", "ruler", "inference_bytes", "recall_raw"):
        assert name in METRIC_DIRECTIONS


def test_every_metric_a_shipped_space_optimises_is_in_the_table():
    for name in ("tiny", "paper_grid", "placement", "hetero"):
        for o in load_space(name).objectives:
            assert o.metric in metric_table.objective_metrics()


def test_unknown_metric_is_an_error_not_a_silent_direction():
    with pytest.raises(ConfigError, match="unknown metric 'recal'. Did you mean: recall?"):
        metric_table.get("recal")
    with pytest.raises(ConfigError, match="registered twice"):
        metric_table.register(metric_table.Metric(name="recall", direction="minimize", title="x"))


def test_units_format_values():
    assert format_metric("kv_cache_bytes", 3 * 2**20) == "3.00 MiB" and format_metric("params", 2.5e6) == "2.50M"
    assert format_metric("val_loss", 1.23456) == "1.235"
