"""Parse model outputs. Model outputs are data: a malformed answer parses to None, never raises.

Every model in the loop ends its answer with `\\boxed{...}`: the policy its action (its number,
or its text), the reward model its verdict (+1 / −1). The *last* box counts, as in the reference
code.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_VERDICT = re.compile(r"^\s*([+-]?)\s*1(?:\.0*)?\s*$")
_INDEX = re.compile(r"^\s*(\d+)")


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` in `text`, or None if there is none."""
    found = _BOXED.findall(text)
    return found[-1] if found else None


def parse_verdict(text: str) -> int | None:
    """The reward model's verdict S ∈ {+1, −1} from the last box holding 1, +1 or −1; else None."""
    box = last_boxed(text)
    if box is None:
        return None
    m = _VERDICT.match(box.replace("−", "-"))
    if m is None:
        return None
    return -1 if m.group(1) == "-" else 1


def parse_action_index(text: str, num_actions: int) -> int | None:
    """The 1-based action number in the last box, 0-based; None if absent or out of range."""
    box = last_boxed(text)
    if box is None:
        return None
    m = _INDEX.match(box)
    if m is None:
        return None
    number = int(m.group(1))
    return number - 1 if 1 <= number <= num_actions else None


def _normalized(text: str) -> str:
    return " ".join(text.split()).lower()


def parse_action(text: str, actions: Sequence[str], action_format: str) -> int | None:
    """The 0-based index in `actions` of the action the answer's last box names; None if it
    names none. `action_format` "number": the box holds the action's 1-based number; "text": it
    holds the action itself (case and runs of whitespace do not matter)."""
    if action_format == "number":
        return parse_action_index(text, len(actions))
    box = last_boxed(text)
    if box is None:
        return None
    wanted = _normalized(box)
    return next((i for i, a in enumerate(actions) if _normalized(a) == wanted), None)
