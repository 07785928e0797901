"""A fresh-model recall result as data: which keys :func:`hlnas.recall.proxy.train_mqar` returns, and whether a
stored one may stand in for training it again. Free of torch: the search's driver reads stored results with it."""

from __future__ import annotations

__all__ = ["RESULT_KEYS", "finished_result"]

#: every key :func:`hlnas.recall.proxy.sweep_result` (so ``train_mqar``) may return: a run's fresh-model recall,
#: whole (a test keeps the two in step)
RESULT_KEYS = ("mqar_acc", "mqar_baselines", "mqar_baseline", "mqar_baseline_name", "mqar_lr", "mqar_steps_done",
               "mqar_s", "mqar_final_loss", "mqar_auc", "mqar_steps_to_target", "mqar_val_baseline", "mqar",
               "mqar_by_hop", "mqar_error", "mqar_budget", "mqar_finished", "mqar_device_name", "mqar_beyond",
               "mqar_beyond_settings")


def finished_result(metrics: dict) -> dict | None:
    """The fresh-model recall result held in a run's ``metrics`` (its :data:`RESULT_KEYS`), when that run trained it
    to the end without error: what another run of the same layout, recall protocol and seed may take instead of
    training it again (``recall=`` of :func:`hlnas.pipeline.run.run`). None for a paused, failed or absent one."""
    if not isinstance(metrics.get("mqar_acc"), (int, float)) or not isinstance(metrics.get("mqar"), dict):
        return None
    if metrics.get("mqar_error") is not None or metrics.get("mqar_finished") is False:
        return None
    return {k: metrics[k] for k in RESULT_KEYS if k in metrics}
