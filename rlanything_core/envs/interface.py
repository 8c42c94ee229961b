"""The one interface between the training loop and an environment (docs/own-environment.md).

An environment is a class derived from `Environment`. The loop never looks inside a task spec and
never branches on an environment's name: it generates, validates, plays, judges and rewrites tasks
only through these methods. `environment.name` in a config names the class: a built-in name
("household"), an entry point of the group `rlanything.environments`, an import path
("my_package.my_module:MyEnvironment") or a file ("path/to/my_env.py:MyEnvironment").
`environment.options` is validated by the class's own `Options` model.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import json
import os
import sys
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar, Generic, Literal, Protocol, TypeVar, runtime_checkable

import pandas as pd
from pydantic import BaseModel, ConfigDict, ValidationError

from rlanything_core.base.generation import Messages
from rlanything_core.envs.common import Check, Episode, Move, SpecError
from rlanything_core.envs.demos import Demo
from rlanything_core.envs.rewriting import (
    CritiqueSource,
    critique_prompt,
    merge_proposal,
    rewrite_prompt,
)

Split = Literal["id", "ood"]
Role = Literal["policy", "reward_model", "env_model"]

ENTRY_POINT_GROUP = "rlanything.environments"


def builtin_names() -> list[str]:
    """The built-in environments: the packages of rlanything_core/envs/ with an `environment`
    module, whose `ENVIRONMENT` is the class. Adding one touches nothing outside its package."""
    return sorted(p.parent.name for p in Path(__file__).parent.glob("*/environment.py"))


class TaskSpec(Protocol):
    """What the loop needs of a task spec (a frozen pydantic model in every built-in)."""

    @property
    def goal_text(self) -> str:
        """The goal in words, shown to the models."""
        ...

    def to_json(self) -> str:
        """The spec as JSON (stored in the tasks dataset's `spec` column)."""
        ...

    def model_dump(self, *, mode: str = "python") -> dict[str, Any]: ...


@dataclass(frozen=True)
class StepView:
    """One step of a rollout, as the reward model's prompt shows it (a rollouts row)."""

    goal: str
    observation: str
    response: str
    action: str | None
    """The action the environment took; None when the answer named none (an invalid answer)."""
    next_observation: str


T = TypeVar("T")


@dataclass(frozen=True)
class WarmStart:
    """A request for warm-start demonstrations (`policy|reward_model|env_model.warm_start`)."""

    role: Role
    episodes: int
    """Expert episodes (env model: task specs) to make the pairs from."""
    noise: float
    """Fraction of random actions in those episodes."""
    label_noise: float
    """Reward model: fraction of step labels flipped."""
    explain: bool
    """The policy's answer format: name the action before the box (policy and judge demos)."""
    specs_seed: int
    """Seed of the specs the demonstrations are made from."""
    seed: int
    """The run's base seed (noise and label draws)."""
    judge_mode: Literal["judge", "unit_tests"] = "judge"
    """Reward model: what it will be asked (`reward_model.mode`): verdicts, or unit tests."""
    episodes_per_task: int = 1
    """Episodes played on each task (`Environment.warm_start_specs`): ⌈episodes / this⌉ tasks."""
    answer_noise: float = 0.0
    """Policy: fraction of demonstrations answered with a uniformly drawn admissible action
    instead of the expert's. An environment that cannot draw one raises `ValueError` when
    this is not 0."""

    @property
    def tasks(self) -> int:
        """How many distinct tasks the episodes are played on."""
        return -(-self.episodes // self.episodes_per_task)

    def repeat(self, tasks: Sequence[T]) -> list[T]:
        """Each of `tasks` `episodes_per_task` times in a row, `episodes` items in all."""
        return [t for t in tasks for _ in range(self.episodes_per_task)][: self.episodes]


class NoOptions(BaseModel):
    """An environment without options: `environment.options` must be empty."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


OptionsT = TypeVar("OptionsT", bound=BaseModel)


class Environment(ABC, Generic[OptionsT]):
    """Everything the training loop needs from one environment.

    Subclasses set `Options` (a pydantic model of `environment.options`, extra keys forbidden;
    `self.options` is an instance of it) and implement the four abstract methods (`parse_spec`,
    `generate`, `new_episode`, `judge_messages`); the others have working defaults.

    The contract, which `rlanything check-env CONFIG` checks in seconds without a model:

    - `generate` is deterministic in `(split, n, seed)` and gives `n` valid specs.
    - A spec survives `parse_spec(spec.to_json())` unchanged (the tasks dataset stores the JSON;
      the acceptance check and `resume` read it back).
    - `parse_spec` raises `SpecError` for any invalid input, naming the field and the fix: the
      environment model's rewrites are parsed by it, and a bad one is an invalid rewrite. (Any
      other exception is counted the same way, but is a bug `check-env` reports.)
    - Every `Episode` ends by itself, whatever the policy answers (see `Episode`).
    - Each round, for a task outside the accuracy band, the environment model is asked first
      for a critique (`critique_messages`: the task's goal, its accuracy and the reward
      model's reasoning or the failed steps' actions) and then for a rewrite
      (`rewrite_messages`: the current spec's JSON, the direction, the critique,
      `rewrite_fields` and `rewrite_example`). Its answer's last JSON object is merged onto the
      spec (`parse_proposal`), e.g. `{"length": 9}`.
    - Warm-start demonstrations (`demonstrations`) are `Demo(task_id, step_idx, prompt, answer)`
      pairs whose answers fit the role's `max_new_tokens`.
    """

    Options: ClassVar[type[BaseModel]] = NoOptions
    warm_starts: ClassVar[frozenset[Role]] = frozenset()
    """The roles `demonstrations` can warm-start."""
    serial: ClassVar[bool] = False
    """Call `Episode.act` in the caller's thread only (engines not made for threads)."""
    designer_system: ClassVar[str] = (
        "You design tasks for an agent. A task is a JSON object; you change its fields to make "
        "it harder or easier."
    )
    """The environment model's system prompt."""

    def __init__(self, name: str, options: OptionsT, pool_split: Split) -> None:
        """`name` as configured (stored in the tasks dataset); `pool_split` = environment.split."""
        self.name = name
        self.options = options
        self.pool_split = pool_split

    # -- tasks
    @abstractmethod
    def parse_spec(self, data: str | dict[str, object]) -> TaskSpec:
        """Validate a spec (JSON text or a dict) completely. Raise `SpecError` (not pydantic's
        `ValidationError` or another exception) naming the field and the fix;
        `rlanything_core.envs.common.validate_spec` does so for a pydantic model."""

    @abstractmethod
    def generate(self, split: Split, n: int, seed: int) -> Sequence[TaskSpec]:
        """`n` specs of `split` (the initial pool, the held-out sets, warm-start specs)."""

    def check_pool(self, n: int, seed: int) -> None:
        """Config-time check that the initial pool can be drawn (default: draw it)."""
        self.generate(self.pool_split, n, seed)

    # -- episodes
    @property
    def act_workers(self) -> int:
        """Threads that call `Episode.act` in parallel (unless `serial`)."""
        return max(1, os.cpu_count() or 1)

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        """Hold what the episodes of one `play` call share (gui: a browser) while it runs."""
        yield

    @abstractmethod
    def new_episode(self, spec: TaskSpec, shots: Path | None, root: Path | None) -> Episode:
        """A fresh `Episode` of `spec` (see its members); `shots`/`root`: where screenshots go,
        if the environment takes any."""

    # -- the reward model
    @abstractmethod
    def judge_messages(self, step: StepView, earlier: Sequence[StepView]) -> Messages:
        """The reward model's prompt for `step`; `earlier`: the rollout's earlier steps."""

    # -- the environment model
    def critique_messages(
        self,
        spec: TaskSpec,
        accuracy: float,
        judgments: pd.DataFrame,
        rollouts: pd.DataFrame,
        source: CritiqueSource,
        examples: int,
    ) -> Messages:
        """The prompt to summarize what makes `spec` hard or easy: the critique the environment
        model rewrites `spec` from (the paper's adaptation from critic feedback)."""
        return critique_prompt(
            self.designer_system, spec.goal_text, accuracy, judgments, rollouts, source, examples
        )

    @property
    def rewriting_skipped(self) -> str | None:
        """Why this environment's tasks cannot be rewritten (the task-rewriting stage then
        proposes nothing and the run says why), or None when they can."""
        return None

    def rewrite_fields(self, spec: TaskSpec) -> str:
        """What each field of a spec means for difficulty (shown in the rewrite prompt)."""
        return ", ".join(spec.model_dump())

    def rewrite_example(self, spec: TaskSpec) -> str:
        """An example answer of changed fields, as JSON."""
        field, value = next(iter(spec.model_dump(mode="json").items()))
        return json.dumps({field: value})

    def rewrite_keys(self, spec: TaskSpec) -> list[str]:
        """The names a rewrite may set (`env_model.constrain_keys` holds its JSON keys to them):
        the spec's fields, which `parse_proposal` merges the rewrite onto."""
        return list(spec.model_dump())

    def rewrite_current(self, spec: TaskSpec) -> str:
        """The current task as the rewrite prompt shows it."""
        return spec.to_json()

    def rewrite_messages(
        self, spec: TaskSpec, direction: str, accuracy: float, critique: str
    ) -> Messages:
        """The prompt that asks for a harder or easier version of `spec`."""
        return rewrite_prompt(
            self.designer_system,
            self.rewrite_current(spec),
            self.rewrite_fields(spec),
            self.rewrite_example(spec),
            direction,
            accuracy,
            critique,
        )

    def parse_proposal(self, text: str, parent: TaskSpec) -> tuple[TaskSpec | None, str | None]:
        """The proposed spec (the answer's last JSON object merged onto `parent`, validated), or
        None and why it is invalid."""
        return merge_proposal(text, parent, self.parse_spec)

    def extra_checks(self) -> list[Check]:
        """Checks only this environment can make, run after the contract's by `check-env`
        (which fails on a problem) and by `train` (which reports it and goes on). Default:
        none; the OpenEnv adapter checks that each task parameter reaches the server."""
        return []

    def tracking_tags(self) -> dict[str, str]:
        """Tags for the run's MLflow run that say which environment it trained on, beyond the
        config's params (OpenEnv: the server's name and URL)."""
        return {}

    # -- warm starts (optional)
    def warm_start_specs(self, request: WarmStart) -> list[TaskSpec]:
        """The tasks `request`'s episodes are played on, in order: ⌈episodes / episodes_per_task⌉
        generated from the pool's split with `specs_seed`, each repeated `episodes_per_task`
        times (the noise makes the repeats differ), `episodes` in all."""
        tasks = self.generate(self.pool_split, request.tasks, request.specs_seed)
        return request.repeat(tasks)

    def demonstrations(self, request: WarmStart) -> list[Demo]:
        """Expert (prompt, answer) pairs for `request.role` (one of `warm_starts`)."""
        raise NotImplementedError(f"{type(self).__name__} has no {request.role} demonstrations")


@runtime_checkable
class WritesUnitTests(Protocol):
    """An environment whose reward model can write unit tests (`reward_model.mode: unit_tests`)."""

    def write_tests(
        self, engine: Any, tasks: Sequence[Any], **sampling: Any
    ) -> list[dict[str, object]]:
        """The RM's tests for every task (unit_tests rows)."""
        ...

    def run_generated_tests(
        self,
        rollouts: pd.DataFrame,
        unit_tests: pd.DataFrame,
        tasks: Sequence[Any],
        on_program: Any = None,
    ) -> list[dict[str, object]]:
        """Every program on its task's generated tests (judgments rows)."""
        ...


def _module(module_name: str, name: str) -> ModuleType:
    """An importable module, or a Python file (a path ending in .py, relative to the working
    directory), loaded once under a name derived from its absolute path."""
    if not module_name.endswith(".py"):
        try:
            return importlib.import_module(module_name)
        except ImportError as exc:
            raise ValueError(
                f"environment.name {name!r}: cannot import module {module_name!r} ({exc}). Put "
                "its package on PYTHONPATH (or install it), or name its file: 'path/to/file.py:"
                "ClassName'."
            ) from exc
    path = Path(module_name).resolve()
    key = "rlanything_user_env_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.spec_from_file_location(key, path)
    if not path.is_file() or spec is None or spec.loader is None:
        raise ValueError(
            f"environment.name {name!r}: {path} is not a Python file; give the path of the file "
            "that defines your environment, relative to the directory you run from."
        )
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module  # before running it: its classes pickle by this name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[key]
        raise
    return module


def _import(path: str, name: str) -> type[Environment[Any]]:
    module_name, _, attr = path.rpartition(":")
    module = _module(module_name, name)
    found = getattr(module, attr, None)
    if not (isinstance(found, type) and issubclass(found, Environment)):
        raise ValueError(
            f"environment.name {name!r}: {module_name} has no Environment subclass {attr!r}; name "
            "a class derived from rlanything_core.envs.interface.Environment."
        )
    return found


def environment_class(name: str) -> type[Environment[Any]]:
    """The class `environment.name` names: a built-in, an entry point of the group
    `rlanything.environments`, "package.module:Class", or "path/to/file.py:Class"."""
    if name in builtin_names():
        return _import(f"{__package__}.{name}.environment:ENVIRONMENT", name)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            return _import(ep.value, name)
    if ":" in name:
        return _import(name, name)
    known = sorted([*builtin_names(), *(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))])
    raise ValueError(
        f"environment.name {name!r} is not a known environment ({', '.join(known)}); name one of "
        "them, or your own class as 'package.module:ClassName' or 'path/to/file.py:ClassName'."
    )


def make_environment(
    name: str, options: dict[str, Any], pool_split: Split
) -> tuple[Environment[Any], dict[str, Any]]:
    """The environment `name` with its options validated (errors name `environment.options.<key>`),
    and the options with every default filled in."""
    cls = environment_class(name)
    try:
        validated = cls.Options.model_validate(options)
    except ValidationError as exc:
        problems = "; ".join(
            ".".join(["environment.options", *(str(p) for p in e["loc"])]) + f": {e['msg']}"
            for e in exc.errors()
        )
        raise ValueError(f"invalid options for environment {name!r}: {problems}") from exc
    missing = sorted(getattr(cls, "__abstractmethods__", ()))
    if missing:
        raise ValueError(
            f"environment.name {name!r}: {cls.__name__} does not implement "
            f"{', '.join(missing)}; define {'them' if len(missing) > 1 else 'it'} in the class "
            "(docs/own-environment.md lists every member)."
        )
    try:
        env = cls(name, validated, pool_split)
    except Exception as exc:
        raise ValueError(
            f"environment.name {name!r}: {cls.__name__}(name, options, pool_split) failed: "
            f"{type(exc).__name__}: {exc}. Its __init__ must accept those three arguments and "
            "pass them to Environment.__init__."
        ) from exc
    return env, validated.model_dump(mode="json")


@dataclass(frozen=True)
class TaskRef:
    """An environment task of the pool: identity and spec."""

    task_id: str
    task_version: int
    spec: TaskSpec


__all__ = [
    "Demo",
    "Environment",
    "Episode",
    "Move",
    "NoOptions",
    "SpecError",
    "StepView",
    "TaskRef",
    "TaskSpec",
    "WarmStart",
    "WritesUnitTests",
    "builtin_names",
    "environment_class",
    "make_environment",
]
