"""Adaptation trigger and acceptance rule (METHOD.md §3), and rewrite proposals parsed."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from rlanything_core.base.generation import Generation, Messages
from rlanything_core.base.schemas import rows_frame
from rlanything_core.envs.household.environment import HouseholdEnvironment, HouseholdOptions
from rlanything_core.envs.interface import TaskRef
from rlanything_core.method.adaptation import accept_candidate, adaptation_direction
from rlanything_core.run.adapting import propose_rewrites
from rlanything_core.run.config import EnvModelConfig


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


class _ScriptedEngine:
    """Answers each prompt with the next scripted text; records what it was asked."""

    def __init__(self, answers: list[str]) -> None:
        self.answers = answers
        self.asked: list[Messages] = []
        self.keys: list[Sequence[str] | None] = []

    def generate(
        self,
        prompts: Sequence[Messages],
        seeds: Sequence[int],
        *,
        max_new_tokens: int,
        temperature: float,
        batch_size: int,
        on_batch: Callable[[int], None] | None = None,
        json_keys: Sequence[str] | None = None,
    ) -> list[Generation]:
        self.asked += list(prompts)
        self.keys.append(json_keys)
        return [Generation(self.answers.pop(0), [], [], [], "stop") for _ in prompts]


def test_propose_rewrites_parses_each_answer_and_takes_given_critiques() -> None:
    env = HouseholdEnvironment("household", HouseholdOptions(), "id")
    spec = env.generate("id", 1, 0)[0]
    triggered = [(TaskRef("t", 1, spec), 0.9, "harder"), (TaskRef("t", 1, spec), 0.1, "easier")]
    frames = rows_frame([], "judgments"), rows_frame([], "rollouts")
    harder = f'{{"num_distractors": {spec.num_distractors + 1}}}'
    kwargs = {"em": EnvModelConfig(), "round_idx": 2, "base_seed": 0, "checkpoint": "ck"}

    # A round: the model writes the critiques, then the rewrites (4 generations).
    engine = _ScriptedEngine(["too easy", "too hard", harder, '{"num_steps": 3}'])
    rows = propose_rewrites(env, engine, triggered, *frames, **kwargs)
    assert [r["critique"] for r in rows] == ["too easy", "too hard"]
    assert [r["valid"] for r in rows] == [True, False]
    assert "num_steps: Extra inputs are not permitted" in str(rows[1]["error"])
    assert "Critique: too easy" in engine.asked[2][-1]["content"]

    # Given critiques: only the rewrites are generated, each prompt carries its critique.
    engine = _ScriptedEngine([harder, "no json here"])
    rows = propose_rewrites(env, engine, triggered, *frames, **kwargs, critiques=["a", "b"])
    assert len(engine.asked) == 2 and "Critique: b" in engine.asked[1][-1]["content"]
    assert [r["valid"] for r in rows] == [True, False] and rows[1]["error"]
    assert engine.keys == [None]  # keys are free unless `constrain_keys` is set

    # `constrain_keys`: the rewrites (not the critiques) are decoded with the spec's fields
    engine = _ScriptedEngine(["too easy", "too hard", harder, harder])
    constrained = kwargs | {"em": EnvModelConfig(constrain_keys=True)}
    propose_rewrites(env, engine, triggered, *frames, **constrained)
    assert engine.keys == [None, sorted(spec.model_dump())]
