"""Model outputs are data: seeded fuzzing of every parser a model's answer meets.

Policy answers (`parse_action`), judge verdicts (`parse_verdict`) and environment-model rewrite
proposals (`Environment.parse_proposal`, each built-in environment and the corridor example)
get random bytes, huge strings, unicode, nested braces and JSON bombs. Each must come back as a
value or as None with a reason (the stages count those), never as an exception, and quickly.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rlanything_core.environment import make_environment
from rlanything_core.envs.alfworld_env import AlfworldSpec
from rlanything_core.envs.common import validate_spec
from rlanything_core.envs.textworld_env import TextWorldSpec
from rlanything_core.parsing import parse_action, parse_verdict
from rlanything_core.rewriting import merge_proposal

ACTIONS = ["go to shelf 1", "take mug 1 from shelf 1", "look", "open cabinet 2"]


def _json_value(rng: random.Random, depth: int = 0) -> object:
    pick = rng.randrange(9 if depth < 3 else 6)
    if pick == 0:
        return rng.choice([0, -1, 1, 2**63, -(2**80), 7])
    if pick == 1:
        return rng.choice([0.5, -1e308, 1e-320, 3.0])
    if pick == 2:
        return rng.choice([True, False, None])
    if pick == 3:
        return "".join(chr(rng.randrange(0x20, 0x2FFF)) for _ in range(rng.randrange(12)))
    if pick == 4:
        return rng.choice(["", "put", "id", "builtin", "x" * 5000, "💥", "\u202e"])
    if pick == 5:
        return rng.choice([[], [1, 2], ["a"], [[1]], [1, 1, 1, 1, 1]])
    if pick == 6:
        return [_json_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice(_KEYS): _json_value(rng, depth + 1) for _ in range(rng.randrange(4))}


_KEYS = [
    # fields of the built-in specs, so merges reach their validation
    "goal", "num_rooms", "num_distractors", "seed", "max_steps", "nb_objects", "world_size",
    "quest_length", "problem", "tests", "entry_point", "hints", "app", "length", "source",
    "", "__class__", "💥",
]  # fmt: skip


def fuzz_texts(seed: int, n: int) -> Iterator[str]:
    """Random answers: bytes, unicode, boxes, JSON with every kind of value, and bombs."""
    rng = random.Random(seed)
    yield ""
    yield "\x00" * 1000
    yield "x" * 1_000_000 + "\\boxed{1}"  # a runaway answer, its box at the end
    yield "\\boxed{" * 100_000
    yield "{" * 200_000
    yield '{"a":' * 100_000
    yield '{"a":' + "[" * 30_000 + "]" * 30_000 + "}"  # nested past the recursion limit
    yield '{"seed": ' + "9" * 5000 + "}"  # past int()'s digit limit
    yield '{"seed": 1e999, "num_rooms": NaN}'
    yield '{"num_rooms": "2"} trailing {"num_rooms": [2]}'
    yield "\\boxed{\ud800}"  # a lone surrogate, as a decoder may leave one
    for _ in range(n):
        kind = rng.randrange(5)
        if kind == 0:
            yield bytes(rng.randrange(256) for _ in range(rng.randrange(300))).decode(
                "utf-8", errors="surrogateescape"
            )
        elif kind == 1:
            yield "".join(chr(rng.randrange(1, 0x10FFFF)) for _ in range(rng.randrange(200)))
        elif kind == 2:
            inner = rng.choice([*ACTIONS, "1", "+1", "−1", "-1", "0", "5", " 2 ", "1.0", "{}"])
            yield "I think " + "\\boxed{" * rng.randrange(3) + inner + "}" * rng.randrange(4)
        elif kind == 3:
            yield "Here: " + json.dumps(_json_value(rng), ensure_ascii=rng.random() < 0.5)
        else:
            body = json.dumps({rng.choice(_KEYS): _json_value(rng) for _ in range(3)})
            yield body[: rng.randrange(len(body) + 1)] + rng.choice(["", "}", "}}", "]"])


def test_policy_answers_and_verdicts_never_raise() -> None:
    start = time.perf_counter()
    for text in fuzz_texts(seed=0, n=3000):
        for fmt in ("number", "text"):
            index = parse_action(text, ACTIONS, fmt)
            assert index is None or 0 <= index < len(ACTIONS)
        assert parse_verdict(text) in (-1, 1, None)
    assert time.perf_counter() - start < 30


@pytest.mark.parametrize("name", ["household", "coding", "gui", "corridor"])
def test_rewrite_proposals_are_a_spec_or_a_reason_never_an_exception(name: str) -> None:
    source = CORRIDOR if name == "corridor" else name
    env = make_environment(source, {}, "id")[0]
    _fuzz_proposals(env.parse_proposal, env.generate("id", 1, seed=0)[0], env.parse_spec)


@pytest.mark.parametrize("name", ["textworld", "alfworld"])
def test_game_proposals_are_a_spec_or_a_reason_never_an_exception(name: str) -> None:
    """TextWorld and ALFWorld proposals up to the field validation (`validate_spec`) that comes
    before their game is generated or looked up (seconds a game; tested in their own modules)."""
    model = {"textworld": TextWorldSpec, "alfworld": AlfworldSpec}[name]
    parent = model.model_validate(_GAME_SPECS[name])

    def parse(data: str | dict[str, object]) -> Any:
        return validate_spec(model, data, name)

    _fuzz_proposals(lambda text, spec: merge_proposal(text, spec, parse), parent, parse)


def _fuzz_proposals(
    propose: Callable[[str, Any], tuple[Any, str | None]], parent: Any, parse: Callable[..., Any]
) -> None:
    start, invalid = time.perf_counter(), 0
    for text in fuzz_texts(seed=1, n=1500):
        spec, why = propose(text, parent)
        assert (spec is None) != (why is None), (text[:200], spec, why)
        if spec is None:
            assert isinstance(why, str) and why
            invalid += 1
        else:
            assert parse(spec.to_json()) == spec  # a valid proposal round-trips
    assert invalid > 1000  # nearly all of it is garbage, and each one is counted as such
    assert time.perf_counter() - start < 60


CORRIDOR = "examples/corridor/corridor.py:CorridorEnvironment"
_GAME_SPECS: dict[str, dict[str, object]] = {
    "textworld": {"world_size": 1, "nb_objects": 2, "quest_length": 1, "max_steps": 8, "seed": 3},
    "alfworld": {"game": "train/some-task/trial_1/game.tw-pddl", "max_steps": 30},
}
