"""What a stored calibration's verdict would be under other thresholds (``hlnas status --as-if``).

A researcher deciding whether a protocol's validity rules ask too much wants to see, from the runs already stored, what
changing one threshold would decide, without training anything again and without touching the stored verdict. Only
the thresholds that judge the runs can change (:data:`AS_IF_KEYS`): seeds, ratios or the protocol would need other runs.
"""

from __future__ import annotations

import yaml

from hlnas.calibration.protocol import verdict
from hlnas.calibration.text import format_table
from hlnas.errors import ConfigError
from hlnas.overrides import yaml_load

__all__ = ["AS_IF_KEYS", "judged_as_if", "study_as_if"]

#: the calibration settings --as-if may change: each judges the stored runs, none changes which runs exist
AS_IF_KEYS = ("control_min", "spread_floor", "pure_below_min_mixers", "graded_min_mixers")


def _changes(items: list[str]) -> dict:
    """``calibration.KEY=VALUE`` items as ``{KEY: value}`` (VALUE read as ``--set`` reads it: hlnas's YAML dialect)."""
    changes = {}
    for item in items:
        key, sep, value = item.partition("=")
        name = key.removeprefix("calibration.")
        if not sep or not key.startswith("calibration.") or name not in AS_IF_KEYS:
            raise ConfigError(f"--as-if {item!r}: expected calibration.KEY=VALUE with KEY one of "
                              f"{', '.join(AS_IF_KEYS)} (thresholds that judge the stored runs)")
        try:
            changes[name] = yaml_load(value)
        except yaml.YAMLError as e:
            raise ConfigError(f"--as-if {item!r}: VALUE is not a number ({e.__class__.__name__})") from None
    return changes


def judged_as_if(space, runs: dict[str, dict], items: list[str]) -> tuple[dict, dict]:
    """The verdict of ``runs`` (a calibration's stored run summaries) under ``space`` with its calibration section
    changed by ``items``, and the changes; a bad key or value raises :class:`~hlnas.errors.ConfigError`."""
    changes = _changes(items)
    other = space.with_overrides(calibration={**space.calibration.to_dict(), **changes})  # validates each value
    return verdict(other, runs), changes


def study_as_if(study, calibration: dict | None, items: list[str]) -> tuple[str, dict]:
    """``hlnas status --as-if``: the stored runs of ``study`` judged under the changed thresholds, as text labelled as
    not stored, and as a record (``verdict``, ``changes``) for ``--json``."""
    from hlnas.space import space_from_dict

    runs = (calibration or {}).get("runs") or {}
    if not runs:
        raise ConfigError(f"--as-if: this study has no stored calibration runs to judge (calibration "
                          f"{(calibration or {}).get('status') or 'not run'})")
    space = space_from_dict(study.user_attrs["hlnas_space"], where=f"study '{study.study_name}'")
    result, changes = judged_as_if(space, runs, items)
    said = ", ".join(f"calibration.{k}={v}" for k, v in changes.items())
    head = (f"AS IF {said} (judged from the {len(runs)} stored runs; printed only, the stored verdict is unchanged): "
            + ("valid" if result["valid"] else "NOT valid: " + "; ".join(result["failures"])))
    return head + "\n" + format_table(result), {"verdict": result, "changes": changes}
