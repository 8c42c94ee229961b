"""The reward model as a unit-test writer (coding; the coding mode of RLAnything's reference code).

Per task and round the reward model writes `tests_per_task` tests, one per answer: reasoning,
then one JSON object in the task's test style ({"stdin": ..., "expected": ...} or
{"args": [...], "expected": ...}). Every rollout program of the task then runs on every valid
generated test in the sandbox. A program's result on generated test j is its "vote" S_j: +1 if
it passes, −1 if it fails, and 0 (an unparsed vote) when test j is invalid, so the policy's
integrated reward R = O + λ·mean_j S_j is the same formula as in step-judge mode.

A malformed test (no JSON, wrong fields for the style) is counted as invalid, never an error.
Seeds: derive_seed(base_seed, "unit-test", round, task_id, task_version, test_idx).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pandas as pd
from pydantic import ValidationError

from rlanything_core.base.generation import Engine, Messages
from rlanything_core.base.seeding import derive_seed
from rlanything_core.envs.coding.tasks import CodeRunner, CodeTest, CodingSpec
from rlanything_core.envs.interface import TaskRef
from rlanything_core.envs.rewriting import last_json_object

UT_SYSTEM = (
    "You write unit tests that tell correct programs from wrong ones. Given a programming "
    "problem, think briefly about an input where a wrong program would fail, then answer with ONE "
    "test as a JSON object."
)


def unit_test_messages(spec: CodingSpec) -> Messages:
    """The reward model's prompt to write one test for a coding task."""
    if spec.style == "stdio":
        form = '{"stdin": "<the input text>", "expected": "<the exact output text>"}'
    else:
        form = f'{{"args": [<arguments of {spec.entry_point}>], "expected": <its return value>}}'
    user = f"Problem: {spec.problem.strip()}\n\nAnswer with one test: {form}"
    return [{"role": "system", "content": UT_SYSTEM}, {"role": "user", "content": user}]


def parse_unit_test(text: str, spec: CodingSpec) -> tuple[CodeTest | None, str | None]:
    """The test in the answer (the last JSON object), or None and why it is invalid."""
    fields, error = last_json_object(text)
    if fields is None:
        return None, error
    wanted = {"stdin", "expected"} if spec.style == "stdio" else {"args", "expected"}
    if set(fields) != wanted:
        return None, f"a {spec.style} test has exactly the fields {sorted(wanted)}"
    try:
        test = CodeTest.model_validate(fields)
    except ValidationError as exc:
        return None, f"invalid test: {exc.errors()[0]['msg']}"
    if spec.style == "stdio" and not (
        isinstance(test.stdin, str) and isinstance(test.expected, str)
    ):
        return None, "a stdio test's stdin and expected must be text"
    if spec.style == "function" and not isinstance(test.args, list):
        return None, "a function test's args must be a list"
    return test, None


def write_tests(
    engine: Engine,
    tasks: Sequence[TaskRef],
    *,
    tests_per_task: int,
    round_idx: int,
    base_seed: int,
    checkpoint: str,
    temperature: float,
    max_new_tokens: int,
    batch_size: int,
    on_batch: Callable[[int], None] | None = None,
) -> list[dict[str, object]]:
    """`tests_per_task` generated tests per coding task; one row each (the unit_tests schema)."""
    jobs = []
    for task in tasks:
        assert isinstance(task.spec, CodingSpec)
        prompt = unit_test_messages(task.spec)
        for j in range(tests_per_task):
            seed = derive_seed(
                base_seed, "unit-test", round_idx, task.task_id, task.task_version, j
            )
            jobs.append((task, j, seed, prompt))
    outs = engine.generate(
        [p for *_, p in jobs],
        [s for _, _, s, _ in jobs],
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        batch_size=batch_size,
        on_batch=on_batch,
    )
    rows = []
    for (task, j, seed, _), out in zip(jobs, outs, strict=True):
        assert isinstance(task.spec, CodingSpec)
        test, error = parse_unit_test(out.text, task.spec)
        rows.append(
            {
                "round": round_idx,
                "task_id": task.task_id,
                "task_version": task.task_version,
                "test_idx": j,
                "seed": seed,
                "checkpoint": checkpoint,
                "prompt": engine.decode(out.prompt_token_ids),
                "response": out.text,
                "test": json.dumps(test.model_dump()) if test is not None else None,
                "valid": test is not None,
                "error": error,
                "finish_reason": out.finish_reason,
                "prompt_token_ids": out.prompt_token_ids,
                "response_token_ids": out.token_ids,
            }
        )
    return rows


def run_generated_tests(
    rollouts: pd.DataFrame,
    unit_tests: pd.DataFrame,
    specs: dict[tuple[str, int], CodingSpec],
    runner: CodeRunner,
    on_program: Callable[[int], None] | None = None,
) -> list[dict[str, object]]:
    """Run every rollout program on its task's valid generated tests; one judgments row per
    (program, test): verdict +1 pass, −1 fail, None for an invalid test."""
    by_task: dict[tuple[str, int], pd.DataFrame] = {
        (str(k[0]), int(k[1])): g.sort_values("test_idx")
        for k, g in unit_tests.groupby(["task_id", "task_version"])
    }

    def check(row: Any) -> list[dict[str, object]]:
        key = (str(row.task_id), int(row.task_version))
        tests = by_task.get(key, unit_tests.iloc[:0])
        valid = tests[tests["valid"]]
        parsed = [CodeTest.model_validate_json(t) for t in valid["test"]]
        program = row.action if isinstance(row.action, str) else None  # null: no code block
        report = runner.run(program, specs[key], parsed) if parsed else None
        passed = dict(zip(valid["test_idx"], report.passed if report else [], strict=True))
        if on_program is not None:
            on_program(1)
        return [
            {
                "round": int(row.round),
                "task_id": row.task_id,
                "task_version": int(row.task_version),
                "rollout_idx": int(row.rollout_idx),
                "step_idx": int(row.step_idx),
                "seed": int(t.seed),
                "checkpoint": t.checkpoint,
                "vote_idx": int(t.test_idx),
                "prompt": t.prompt,
                "reasoning": t.response,
                "verdict": (1 if passed[t.test_idx] else -1) if t.valid else None,
                "finish_reason": t.finish_reason,
                "prompt_token_ids": [],  # the RM trains on unit_tests rows, not on these
                "response_token_ids": [],
            }
            for t in tests.itertuples()
        ]

    with ThreadPoolExecutor(max_workers=runner.workers) as pool:
        per_program = list(pool.map(check, list(rollouts.itertuples())))
    return [vote for votes in per_program for vote in votes]
