"""Parsing of model outputs (malformed → None, never an exception) and seed derivation."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rlanything_core.base.seeding import derive_seed
from rlanything_core.method.parsing import parse_action, parse_action_index, parse_verdict


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("fine. \\boxed{1}", 1),
        ("\\boxed{+1}", 1),
        ("bad \\boxed{-1}", -1),
        ("bad \\boxed{−1}", -1),  # Unicode minus
        ("first \\boxed{-1} then \\boxed{1}", 1),  # the last box counts
        ("\\boxed{ -1.0 }", -1),
        ("\\boxed{2}", None),
        ("\\boxed{yes}", None),
        ("no box at all: +1", None),
        ("\\boxed{", None),
        ("", None),
    ],
)
def test_parse_verdict(text: str, verdict: int | None) -> None:
    assert parse_verdict(text) == verdict


@pytest.mark.parametrize(
    ("text", "index"),
    [
        ("go to the fridge \\boxed{3}", 2),
        ("\\boxed{3. go to fridge 1}", 2),
        ("\\boxed{1}", 0),
        ("\\boxed{0}", None),  # numbering starts at 1
        ("\\boxed{6}", None),  # out of range for 5 actions
        ("\\boxed{go}", None),
        ("3", None),
    ],
)
def test_parse_action_index(text: str, index: int | None) -> None:
    assert parse_action_index(text, num_actions=5) == index


_ACTIONS = ["look", "go to shelf 1", "take cup 1 from shelf 1"]


@pytest.mark.parametrize(
    ("text", "fmt", "index"),
    [
        ("\\boxed{go to shelf 1}", "text", 1),
        ("I will look. \\boxed{Take  cup 1 from\tshelf 1 }", "text", 2),  # case, spaces
        ("\\boxed{look} then \\boxed{go to shelf 1}", "text", 1),  # the last box counts
        ("\\boxed{go to shelf 2}", "text", None),  # not admissible
        ("\\boxed{2}", "text", None),  # the list has no numbers in this format
        ("go to shelf 1", "text", None),  # no box
        ("\\boxed{2}", "number", 1),
        ("\\boxed{go to shelf 1}", "number", None),
    ],
)
def test_parse_action_by_number_or_by_text(text: str, fmt: str, index: int | None) -> None:
    assert parse_action(text, _ACTIONS, fmt) == index


def test_derive_seed_is_stable_across_processes() -> None:
    code = (
        "from rlanything_core.base.seeding import derive_seed; "
        "print(derive_seed(7, 'rollout', 2, 'task-1', 5))"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": str(h)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for h in (0, 1)
    }
    assert outs == {str(derive_seed(7, "rollout", 2, "task-1", 5))}
    assert derive_seed(7, "rollout", 2, "task-1", 5) != derive_seed(7, "rollout", 2, "task-1", 6)
    assert 0 <= derive_seed("x") < 2**63
