"""Parse model outputs. Model outputs are data: a malformed answer parses to None, never raises.

Every model in the loop ends its answer with `\\boxed{...}`: the policy its action number, the
reward model its verdict (+1 / −1). The *last* box counts, as in the reference code.
"""

from __future__ import annotations

import re

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
