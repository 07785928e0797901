"""Which of the calibration's graded checks can still pass, from part of its runs (``hlnas.calibration.protocol``'s verdict asks
them of every seed; a calibration spread over several GPU calls stops once they cannot).

* **pure below its hybrid** (:func:`pure_below`): each pure seed below the same seed's hybrid, and the means apart by
  more than twice the larger seed spread (:func:`spread`, never below the floor);
* :func:`pure_below_ruled_out` says why one mixer can no longer pass it, :func:`pure_below_short` why too few mixers
  can; :func:`graded_short` the same for the graded measure's check.

Plain functions of stored run summaries and the verdict's per-mixer checks: nothing here imports the verdict, which
imports these.
"""

from __future__ import annotations

__all__ = ["spread", "pure_below", "pure_below_ruled_out", "pure_below_short", "graded_short"]


def spread(values: list[float], floor: float) -> float:
    """A row's seed spread, max - min, never below ``floor`` (so equal seeds are never "separated")."""
    return max(max(values) - min(values), floor) if values else floor


def pure_below(pure: dict[int, float], hyb: dict[int, float], floor: float) -> tuple[bool, float, float]:
    """The verdict's "pure below its hybrid" on every seed's recall (``seed -> value``): each pure seed below the same
    seed's hybrid and the means apart by more than twice the larger seed spread. ``(holds, gap, twice the spread)``."""
    gap = sum(hyb.values()) / len(hyb) - sum(pure.values()) / len(pure)
    need = 2 * max(spread(list(pure.values()), floor), spread(list(hyb.values()), floor))
    return all(v < hyb.get(s, float("-inf")) for s, v in pure.items()) and gap > need, gap, need


def pure_below_ruled_out(mixer: str, runs: dict[str, dict], cfg) -> str | None:
    """Why ``mixer``'s pure model can no longer sit below its hybrid in the verdict's sense (every seed below the
    hybrid's, and the means apart by more than twice the seed spread), from its stored runs; None while it can.

    Recall is an accuracy, at most 1. With ``n`` seeds, a pure seed at ``v`` and the spread at least the floor ``f``,
    the gap ``hybrid mean - pure mean`` can exceed twice the spread only if ``1 - v > (1 + 1/n) f``: a lower other seed
    adds to the spread twice what it takes off the pure mean. So a pure seed within ``(1 + 1/n) f`` of 1 rules the
    mixer out, as does a pure seed not below the same seed's hybrid, and a pair with every seed scored that is not
    apart by more than twice the spread (the verdict's own test: those runs are final)."""
    scored = {(r["role"], r["seed"]): float(r["raw_train_length"]) for r in runs.values()
              if r["mixer"] == mixer and r["status"] == "ok" and r.get("raw_train_length") is not None
              and r["role"] in ("pure", "hybrid")}
    pure, hyb = ({seed: v for (role, seed), v in sorted(scored.items()) if role == want} for want in ("pure", "hybrid"))
    if len(pure) >= cfg.seeds and len(hyb) >= cfg.seeds:
        _, gap, need = pure_below(pure, hyb, cfg.spread_floor)
        if not gap > need:  # a pure seed not below its hybrid's is named below
            shown = [", ".join(f"{v:.3f}" for v in vals.values()) for vals in (pure, hyb)]
            return (f"{mixer} pure ({shown[0]}) and its {cfg.hybrid_ratio} hybrid ({shown[1]}) are {gap:+.3f} "
                    f"apart, not more than twice the seed spread ({need:.3f})")
    room = (1 + 1 / cfg.seeds) * cfg.spread_floor
    for (role, seed), v in sorted(scored.items()):
        if role != "pure":
            continue
        if 1 - v <= room:
            return f"{mixer} pure scored {v:.3f} on seed {seed}, within {room:.3f} of the ceiling 1"
        h = scored.get(("hybrid", seed))
        if h is not None and v >= h:
            return f"{mixer} pure scored {v:.3f} on seed {seed}, not below its {cfg.hybrid_ratio} hybrid's {h:.3f}"
    return None


def graded_short(space, checks: dict[str, dict]) -> str | None:
    """The graded check's certain failure, or None while enough mixers can still pass it: a mixer is out once every
    seed of its ladder (pure, graded ratios, hybrid) is scored and its measure does not rise without a fall.
    ``checks``: the verdict's per-mixer checks (``hlnas.calibration.protocol._mixer_checks``)."""
    need = space.calibration.graded_min_mixers  # 0: never short
    out = {m: c for m, c in checks.items() if c["graded"] in ("falls", "flat")}
    left = [m for m in space.mixers if m not in out]
    if len(left) >= need:
        return None
    why = "; ".join(f"{m} {c['graded']}" + "".join(f" ({f['from']} -> {f['to']} by {f['by']:.3f})" for f in c["falls"])
                    for m, c in out.items())
    return (f"the graded measure can rise with the attention share for at most {len(left)} mixer(s) "
            f"({', '.join(left) or 'none'}), where calibration.graded_min_mixers={need}: {why}")


def pure_below_short(space, runs: dict[str, dict]) -> str | None:
    """The pure_below check's certain failure, as a message, or None while enough mixers can still pass it."""
    cfg = space.calibration
    if not cfg.pure_below_min_mixers:
        return None
    out = {m: why for m in space.mixers if (why := pure_below_ruled_out(m, runs, cfg))}
    left = [m for m in space.mixers if m not in out]
    if len(left) >= cfg.pure_below_min_mixers:
        return None
    return (f"the pure model can sit below its {cfg.hybrid_ratio} hybrid for at most {len(left)} mixer(s) "
            f"({', '.join(left) or 'none'}), where calibration.pure_below_min_mixers={cfg.pure_below_min_mixers}: "
            + "; ".join(out.values()))
