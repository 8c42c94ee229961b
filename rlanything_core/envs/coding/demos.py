"""Supervised data for coding warm starts, made from reference solutions (nothing downloaded).

- policy: the problem's prompt answered with its reference solution in a python block;
- reward model, judge mode: the reference judged +1, another problem's reference judged −1, a
  fraction `label_noise` of the labels flipped so the reward model starts imperfect;
- reward model, unit-test mode: the test-writing prompt answered with one of the problem's own
  tests as JSON.
"""

from __future__ import annotations

import json
import random

from rlanything_core.envs.coding.tasks import CodingSpec, judge_messages, policy_messages
from rlanything_core.envs.coding.unit_tests import unit_test_messages
from rlanything_core.envs.demos import Demo

Pair = tuple[CodingSpec, str]


def _fenced(program: str) -> str:
    return f"```python\n{program.strip()}\n```"


def coding_policy_demonstrations(pairs: list[Pair]) -> list[Demo]:
    return [
        Demo(f"demo-{n:03d}", 0, policy_messages(spec), _fenced(reference))
        for n, (spec, reference) in enumerate(pairs)
    ]


def coding_judge_demonstrations(pairs: list[Pair], *, label_noise: float, seed: int) -> list[Demo]:
    rng = random.Random(seed)
    out = []
    for n, (spec, reference) in enumerate(pairs):
        others = [ref for k, (_, ref) in enumerate(pairs) if k != n]
        candidates = [(reference, True)] + ([(rng.choice(others), False)] if others else [])
        for program, good in candidates:
            label = good != (rng.random() < label_noise)
            prompt = judge_messages(spec.problem, _fenced(program), program)
            verdict = "Correct. \\boxed{1}" if label else "Wrong. \\boxed{-1}"
            out.append(Demo(f"demo-{n:03d}", 0, prompt, verdict))
    return out


def unit_test_demonstrations(pairs: list[Pair]) -> list[Demo]:
    out = []
    for n, (spec, _) in enumerate(pairs):
        prompt = unit_test_messages(spec)
        for test in spec.tests:
            fields = (
                {"stdin": test.stdin, "expected": test.expected}
                if spec.style == "stdio"
                else {"args": test.args, "expected": test.expected}
            )
            out.append(Demo(f"demo-{n:03d}", 0, prompt, json.dumps(fields)))
    return out
