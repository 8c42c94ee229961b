"""Environment adaptation: which tasks to rewrite, and which rewrites to accept (RLAnything,
arXiv 2602.02488, environment adaptation from critic feedback).

After a round, a task q whose accuracy leaves (α_low, α_high), the paper's (0.2, 0.8), is
rewritten by the environment model: too easy → harder, too hard → easier. A candidate q' is
rolled out G times and accepted only if its accuracy moved in the asked direction without
leaving the band.

Departures from the paper, each a setting:
1. `bounds="strict"` (default) is the paper's rule: harder needs α_low < acc(q') < acc(q), easier
   needs acc(q) < acc(q') < α_high. `bounds="inclusive"` is the reference code's: the α bounds
   admit equality (α_low ≤ acc(q'), acc(q') ≤ α_high). The comparison with acc(q) stays strict
   in both: a rewrite that leaves the accuracy unchanged changed nothing.
2. acc(q') > 0 is required in both: at least one success proves q' is solvable.
"""

from __future__ import annotations

from typing import Literal

Direction = Literal["harder", "easier"]
Bounds = Literal["strict", "inclusive"]


def adaptation_direction(
    accuracy: float, alpha_low: float = 0.2, alpha_high: float = 0.8
) -> Direction | None:
    """Trigger: acc(q) ≥ α_high → "harder"; acc(q) ≤ α_low → "easier"; else None (keep q).

    A task is rewritten when its accuracy is *outside* the open band (α_low, α_high).
    """
    if not 0.0 <= alpha_low < alpha_high <= 1.0:
        raise ValueError(
            f"need 0 ≤ alpha_low < alpha_high ≤ 1, got alpha_low={alpha_low}, "
            f"alpha_high={alpha_high}"
        )
    if accuracy >= alpha_high:
        return "harder"
    if accuracy <= alpha_low:
        return "easier"
    return None


def accept_candidate(
    direction: Direction,
    acc_parent: float,
    acc_candidate: float,
    alpha_low: float = 0.2,
    alpha_high: float = 0.8,
    bounds: Bounds = "strict",
) -> bool:
    """Acceptance rule for a rewritten task q' of parent q.

    harder: α_low < acc(q') < acc(q)       (inclusive: α_low ≤ acc(q') < acc(q))
    easier: acc(q) < acc(q') < α_high      (inclusive: acc(q) < acc(q') ≤ α_high)
    and always acc(q') > 0.
    """
    if acc_candidate <= 0.0:
        return False
    if direction == "harder":
        above_low = (
            acc_candidate >= alpha_low if bounds == "inclusive" else acc_candidate > alpha_low
        )
        return above_low and acc_candidate < acc_parent
    if direction == "easier":
        below_high = (
            acc_candidate <= alpha_high if bounds == "inclusive" else acc_candidate < alpha_high
        )
        return below_high and acc_candidate > acc_parent
    raise ValueError(f"direction must be 'harder' or 'easier', got {direction!r}")
