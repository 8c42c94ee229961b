"""Adaptation trigger and acceptance rule (METHOD.md §3)."""

from __future__ import annotations

import pytest

from rlanything_core.method.adaptation import accept_candidate, adaptation_direction


def test_trigger_by_hand() -> None:
    # Outside the open band (0.2, 0.8): ≤ 0.2 easier, ≥ 0.8 harder, in between untouched.
    assert [adaptation_direction(a) for a in (0.0, 0.2, 0.21, 0.5, 0.79, 0.8, 1.0)] == [
        "easier",
        "easier",
        None,
        None,
        None,
        "harder",
        "harder",
    ]


def test_trigger_rejects_bad_band() -> None:
    with pytest.raises(ValueError, match="alpha_low < alpha_high"):
        adaptation_direction(0.5, alpha_low=0.8, alpha_high=0.2)


def test_acceptance_by_hand() -> None:
    # harder from 0.9: 0.5 is inside (0.2, 0.9) → accept; 0.2 only with inclusive bounds.
    assert accept_candidate("harder", 0.9, 0.5)
    assert not accept_candidate("harder", 0.9, 0.2)
    assert accept_candidate("harder", 0.9, 0.2, bounds="inclusive")
    # equal accuracy is no change: rejected under both bounds
    assert not accept_candidate("harder", 0.9, 0.9, bounds="inclusive")
    # easier from 0.0 to 0.3 → accept; an unsolved candidate never is
    assert accept_candidate("easier", 0.0, 0.3)
    assert not accept_candidate("easier", 0.0, 0.0, bounds="inclusive")
    assert not accept_candidate("harder", 0.5, 0.0, alpha_low=0.0, bounds="inclusive")


def test_golden_trigger_and_acceptance(golden: dict) -> None:
    trig = golden["adaptation_trigger"]
    for case in trig["cases"]:
        got = adaptation_direction(case["acc"], trig["alpha_low"], trig["alpha_high"])
        assert got == case["action"], case
    acc = golden["acceptance"]
    for case in acc["cases"]:
        args = (case["direction"], case["acc_parent"], case["acc_candidate"])
        band = (acc["alpha_low"], acc["alpha_high"])
        assert accept_candidate(*args, *band, bounds="strict") == case["accept_strict"], case
        assert accept_candidate(*args, *band, bounds="inclusive") == case["accept_inclusive"], case
