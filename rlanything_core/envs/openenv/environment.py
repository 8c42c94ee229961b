"""Any OpenEnv environment server (`environment.name: openenv`), trained through the same seven
stages as a built-in: the policy plays episodes over the server's WebSocket sessions, the reward
model judges their steps, and, where the server's reset takes task parameters, the environment
model rewrites those parameters under the same acceptance rule (docs/openenv.md).

A task is the reset's keyword arguments: a `seed` and the parameters declared in
`environment.options.task_params`, drawn from their declared ranges, plus the episode's step
limit `max_steps`. Without declared parameters the tasks differ by seed only, and task rewriting
is skipped (the run says so)."""

from __future__ import annotations

import contextlib
import json
import random
import re
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from rlanything_core.base.generation import Messages
from rlanything_core.envs.common import Check, Move, validate_spec
from rlanything_core.envs.interface import Environment, Split, StepView, TaskSpec
from rlanything_core.envs.openenv.client import (
    ActionRejected,
    LocalServer,
    OpenEnvError,
    Session,
    get_json,
)
from rlanything_core.method.prompts import INVALID_ACTION, judge_messages

JSON_ACTION = "json"
"""`action_field` value for a policy that answers the whole action as a JSON object."""
PROBE_ANSWERS = ("\\boxed{1}", "\\boxed{2}", "\\boxed{3}")
"""The moves both episodes of a task-parameter probe answer, the same in each."""


class ParamRange(BaseModel):
    """The values one reset parameter takes: `[min, max]` (integers if both are) or `choices`."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    min: int | float | None = None
    max: int | float | None = None
    choices: list[str | int | float] | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> ParamRange:
        ranged = self.min is not None and self.max is not None
        if ranged == bool(self.choices) or (not ranged and (self.min, self.max) != (None, None)):
            raise ValueError("give either both min and max, or a non-empty list of choices")
        if ranged and cast(float, self.min) > cast(float, self.max):
            raise ValueError(f"min {self.min} is above max {self.max}")
        return self

    @property
    def integer(self) -> bool:
        return isinstance(self.min, int) and isinstance(self.max, int)

    def draw(self, rng: random.Random) -> str | int | float:
        if self.choices:
            return rng.choice(self.choices)
        low, high = cast(float, self.min), cast(float, self.max)
        if self.integer:
            return rng.randint(int(low), int(high))
        return round(rng.uniform(low, high), 4)

    def field(self) -> tuple[Any, Any]:
        """The spec field's type and constraints (pydantic names the bound a value breaks)."""
        if self.choices:
            return Literal[tuple(self.choices)], ...
        if self.integer:
            return int, Field(ge=int(cast(float, self.min)), le=int(cast(float, self.max)))
        return float, Field(ge=self.min, le=self.max)

    def covering(self, other: ParamRange | None) -> ParamRange:
        """The values of this range and of `other` (the spec accepts both splits' tasks)."""
        if other is None:
            return self
        if self.choices or other.choices:
            merged = list(dict.fromkeys([*(self.choices or []), *(other.choices or [])]))
            return ParamRange(choices=merged)
        return ParamRange(
            min=min(cast(float, self.min), cast(float, other.min)),
            max=max(cast(float, self.max), cast(float, other.max)),
        )

    def ends(self) -> tuple[str | int | float, str | int | float]:
        """Two values as far apart as the range allows: its bounds, or its first and last
        choice."""
        if self.choices:
            return self.choices[0], self.choices[-1]
        return cast(float, self.min), cast(float, self.max)

    def describe(self) -> str:
        if self.choices:
            return "one of " + ", ".join(json.dumps(c) for c in self.choices)
        return f"from {self.min:g} to {self.max:g}"


class OpenEnvOptions(BaseModel):
    """`environment.options` of the OpenEnv adapter. Exactly one of `url` and `command`."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    url: str | None = None
    """The server's base URL, e.g. http://127.0.0.1:8000 (its /ws, /schema and /metadata are
    used)."""
    command: str | None = None
    """A command that starts the server on port `{port}`, e.g. "python server.py --port {port}"
    (a leading `python` is the interpreter running rlanything); it runs from the working
    directory, once per stage that plays episodes, on a free loopback port, and is stopped when
    the stage's episodes end."""
    start_timeout: float = Field(60.0, gt=0)
    """Seconds the started server may take to answer /health."""
    timeout: float = Field(60.0, gt=0)
    """Seconds one reset or step may take."""
    task_params: dict[str, ParamRange] = {}
    """The reset's task parameters and their values in the pool, e.g. {high: {min: 8, max: 64}};
    the environment model rewrites them. Empty: tasks differ by seed, and are not rewritten."""
    ood_task_params: dict[str, ParamRange] | None = None
    """The parameters' values of the out-of-domain held-out split (default: `task_params`)."""
    goal: str = "finish the episode successfully"
    """The goal in words; `{name}` placeholders become the task's parameters."""
    instructions: str | None = None
    """The policy's system prompt (default: names the action field and the \\boxed{} answer)."""
    action_field: str | None = None
    """The action field the policy's answer fills (default: the action schema's only required
    field); "json": the answer is the whole action as a JSON object."""
    observation_field: str | None = None
    """The observation field the policy reads (default: the only field, or all of them as
    JSON)."""
    max_steps: int = Field(20, ge=1, le=1000)
    """The step limit of a generated task."""
    success_reward: float = 1.0
    """An episode succeeds when it ends (done) with a last reward at least this."""
    progress_reward: float = 0.0
    """A step counts as progress (the reward model's ground truth) when its reward is above
    this."""
    history_steps: int = Field(3, ge=0, le=20)
    """Earlier steps shown in the reward model's prompt."""

    @model_validator(mode="after")
    def _one_server(self) -> OpenEnvOptions:
        if (self.url is None) == (self.command is None):
            raise ValueError(
                "give exactly one of url (a running server) and command (one that starts a "
                "server on port {port})"
            )
        if self.command is not None and "{port}" not in self.command:
            raise ValueError("command must contain {port}, where the server's port goes")
        if self.url is not None and not re.match(r"https?://", self.url):
            raise ValueError(f"url {self.url!r} must start with http:// or https://")
        reserved = {"seed", "max_steps"} & (set(self.task_params) | set(self.ood_task_params or {}))
        if reserved:
            raise ValueError(f"task_params may not be named {', '.join(sorted(reserved))}")
        if self.ood_task_params is not None and set(self.ood_task_params) != set(self.task_params):
            raise ValueError("ood_task_params must name the same parameters as task_params")
        return self


class OpenEnvTask(BaseModel):
    """One task: the reset's `seed`, its parameters (fields added per environment) and the
    episode's step limit."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    goal_template: ClassVar[str] = "finish the episode successfully"
    seed: int = Field(ge=0, lt=2**31)
    max_steps: int = Field(ge=1, le=1000)

    @property
    def goal_text(self) -> str:
        try:
            return self.goal_template.format(**self.params())
        except (KeyError, IndexError, ValueError):
            return self.goal_template

    def params(self) -> dict[str, Any]:
        """The task parameters (what reset receives besides the seed)."""
        return self.model_dump(exclude={"seed", "max_steps"})

    def to_json(self) -> str:
        return self.model_dump_json()


def _answer_text(answer: str) -> str:
    """The answer's last \\boxed{...} (nested braces allowed), else the whole answer."""
    start = answer.rfind("\\boxed{")
    if start < 0:
        return answer.strip()
    depth, i = 1, start + len("\\boxed{")
    for j in range(i, len(answer)):
        depth += {"{": 1, "}": -1}.get(answer[j], 0)
        if depth == 0:
            return answer[i:j].strip()
    return answer[i:].strip()


class OpenEnvEpisode:
    """One episode on its own server session (`rlanything_core.envs.common.Episode`)."""

    screenshot: str | None = None

    def __init__(self, env: OpenEnvEnvironment, spec: OpenEnvTask, session: Session) -> None:
        self.env, self.spec, self.session = env, spec, session
        self.goal_text = spec.goal_text
        self.steps_taken, self.success = 0, False
        first = session.reset({"seed": spec.seed, **spec.params()})
        self.observation = env.observation_text(first.observation)
        self.done = first.done
        if self.done:
            self.close()

    def messages(self) -> list[dict[str, str]]:
        user = f"Task: {self.goal_text}.\nObservation: {self.observation}"
        return [
            {"role": "system", "content": self.env.instructions},
            {"role": "user", "content": user},
        ]

    def act(self, answer: str) -> Move:
        self.steps_taken += 1
        action = self.env.action(answer)
        reward: float | None = None
        if action is None:
            valid, shown = False, None
        else:
            try:
                result = self.session.step(action)
            except ActionRejected:
                valid, shown = False, None
            else:
                valid, shown = True, self.env.action_text(action)
                self.observation = self.env.observation_text(result.observation)
                reward = result.reward
                if result.done:
                    self.done = True
                    self.success = reward is not None and reward >= self.env.options.success_reward
        if self.steps_taken >= self.spec.max_steps:
            self.done = True
        if self.done:
            self.close()
        progress = reward is not None and reward > self.env.options.progress_reward
        return Move(shown, valid, self.observation, progress, self.done)

    def close(self) -> None:
        self.env.release(self.session)


class OpenEnvEnvironment(Environment[OpenEnvOptions]):
    """An OpenEnv server behind the interface; see the module's docstring."""

    Options = OpenEnvOptions
    designer_system = (
        "You design tasks for an agent in an environment. A task is a JSON object of the "
        "environment's reset parameters; you change them to make it harder or easier."
    )

    def __init__(self, name: str, options: OpenEnvOptions, pool_split: Split) -> None:
        super().__init__(name, options, pool_split)
        far = options.ood_task_params or {}
        self.bounds = {k: r.covering(far.get(k)) for k, r in options.task_params.items()}
        """Each parameter's values in either split: what a valid task (and a rewrite) holds."""
        fields = {k: r.field() for k, r in self.bounds.items()}
        self.spec_model: type[OpenEnvTask] = create_model(  # type: ignore[call-overload]
            "OpenEnvTask", __base__=OpenEnvTask, **fields
        )
        self.spec_model.goal_template = options.goal
        self._lock = threading.Lock()
        self._base: str | None = None
        self._sessions: set[Session] = set()
        self._action_field: str | None = None
        self._observation_field: str | None = options.observation_field
        self.instructions = options.instructions or ""
        self.server_name = ""

    # -- tasks
    def parse_spec(self, data: str | dict[str, object]) -> OpenEnvTask:
        return validate_spec(self.spec_model, data, "openenv")

    def generate(self, split: Split, n: int, seed: int) -> Sequence[OpenEnvTask]:
        """Seeds and parameters drawn from the split's declared values."""
        ranges = (
            self.options.ood_task_params or self.options.task_params
            if split == "ood"
            else self.options.task_params
        )
        rng = random.Random(f"openenv-{split}-{seed}")
        return [
            self.spec_model(
                seed=rng.randrange(2**31),
                max_steps=self.options.max_steps,
                **{k: r.draw(rng) for k, r in ranges.items()},
            )
            for _ in range(n)
        ]

    @property
    def rewriting_skipped(self) -> str | None:
        if self.options.task_params:
            return None
        return (
            "the OpenEnv environment declares no task parameters (environment.options."
            "task_params), so its tasks differ by seed only and are not rewritten"
        )

    def rewrite_fields(self, spec: TaskSpec) -> str:
        return (
            "; ".join(f"{k}: {r.describe()}" for k, r in self.bounds.items())
            + "; seed: which episode of those parameters; max_steps: the steps allowed"
        )

    def rewrite_keys(self, spec: TaskSpec) -> list[str]:
        return [*self.options.task_params, "max_steps"]

    def rewrite_example(self, spec: TaskSpec) -> str:
        task = cast(OpenEnvTask, spec)
        params = task.params()
        if params:
            key = next(iter(params))
            return json.dumps({key: params[key]})
        return json.dumps({"max_steps": task.max_steps})

    # -- episodes
    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        """The server while the episodes of one `play` call run: started from `command`, or
        the one at `url`; the action field and the observation's shape are read from its
        /schema, its name from /metadata."""
        server = (
            LocalServer(self.options.command, self.options.start_timeout)
            if self.options.command is not None
            else None
        )
        try:
            base = server.url if server is not None else cast(str, self.options.url)
            self._connect(base)
            yield
        finally:
            with self._lock:
                open_sessions, self._sessions = list(self._sessions), set()
            for s in open_sessions:
                s.close()
            self._base = None
            if server is not None:
                server.stop()

    def _connect(self, base: str) -> None:
        schema = get_json(base, "/schema", self.options.timeout)
        metadata = get_json(base, "/metadata", self.options.timeout)
        self.server_name = str(metadata.get("name") or "openenv")
        action = schema.get("action") or {}
        fields = {k: v for k, v in (action.get("properties") or {}).items() if k != "metadata"}
        required = [k for k in action.get("required") or [] if k in fields]
        chosen = self.options.action_field
        if chosen is None:
            if len(required) != 1:
                raise OpenEnvError(
                    f"the action of OpenEnv environment {self.server_name!r} ({base}) has "
                    f"{len(required)} required fields ({', '.join(required) or 'none'}) of "
                    f"{', '.join(fields)}; set environment.options.action_field to the one the "
                    f"policy's answer fills, or to {JSON_ACTION!r} for a whole JSON action."
                )
            chosen = required[0]
        elif chosen != JSON_ACTION and chosen not in fields:
            raise OpenEnvError(
                f"environment.options.action_field {chosen!r} is not a field of the action of "
                f"OpenEnv environment {self.server_name!r} ({', '.join(fields)}); name one of "
                f"them, or {JSON_ACTION!r}."
            )
        observed = schema.get("observation") or {}
        shown = [
            k for k in (observed.get("properties") or {}) if k not in ("done", "reward", "metadata")
        ]
        if self.options.observation_field is None:
            self._observation_field = shown[0] if len(shown) == 1 else None
        elif self.options.observation_field not in shown:
            raise OpenEnvError(
                f"environment.options.observation_field {self.options.observation_field!r} is "
                f"not a field of the observation of OpenEnv environment {self.server_name!r} "
                f"({', '.join(shown)}); name one of them."
            )
        self._action_field = chosen
        self.instructions = self.options.instructions or self._instructions(
            chosen, fields.get(chosen, {})
        )
        self._base = base

    def _instructions(self, field: str, schema: dict[str, Any]) -> str:
        what = (
            "the whole action as one JSON object"
            if field == JSON_ACTION
            else f"the action's {field}"
            + (f" ({schema['description']})" if schema.get("description") else "")
        )
        return (
            f"You are an agent in the environment {self.server_name}. Reach the goal in as few "
            f"steps as possible. Think briefly, then answer with {what} in \\boxed{{}}."
        )

    def new_episode(self, spec: TaskSpec, shots: Path | None, root: Path | None) -> OpenEnvEpisode:
        if self._base is None:
            raise RuntimeError("OpenEnv episodes are made inside OpenEnvEnvironment.session()")
        session = Session(self._base, self.options.timeout)
        with self._lock:
            self._sessions.add(session)
        try:
            return OpenEnvEpisode(self, cast(OpenEnvTask, spec), session)
        except BaseException:
            self.release(session)
            raise

    def release(self, session: Session) -> None:
        """Close an episode's session (its server-side environment ends with it)."""
        with self._lock:
            self._sessions.discard(session)
        session.close()

    def action(self, answer: str) -> dict[str, Any] | None:
        """The action the policy's answer names, or None when it names none."""
        text = _answer_text(answer)
        if not text:
            return None
        if self._action_field == JSON_ACTION:
            try:
                value = json.loads(text)
            except ValueError:
                return None
            return value if isinstance(value, dict) else None
        return {cast(str, self._action_field): text}

    def action_text(self, action: dict[str, Any]) -> str:
        """The action as the reward model's prompt shows it: the field's value, or the JSON."""
        if self._action_field == JSON_ACTION:
            return json.dumps(action, ensure_ascii=False, sort_keys=True)
        return str(action[cast(str, self._action_field)])

    def observation_text(self, observation: dict[str, Any]) -> str:
        if self._observation_field is not None:
            value = observation.get(self._observation_field)
            return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        return json.dumps(observation, ensure_ascii=False, sort_keys=True)

    def judge_messages(self, step: StepView, earlier: Sequence[StepView]) -> Messages:
        h = self.options.history_steps
        shown = [(s.action or INVALID_ACTION, s.next_observation) for s in earlier[-h:] if h]
        return judge_messages(
            step.goal, shown, step.observation, step.response, step.action, step.next_observation
        )

    def extra_checks(self) -> list[Check]:
        """Each task parameter reaches the server's reset. OpenEnv passes a keyword argument
        that a reset does not take on without a word, so a misspelt `task_params` name would
        make every task the same game and every rewrite a no-op. Two episodes of one seed, the
        parameter at each end of its values, must differ in what the server shows: the first
        observation, or its answers to the same few moves."""
        if not self.bounds:
            return []
        name = "task parameters reach the server's reset"
        base = cast(OpenEnvTask, self.generate(self.pool_split, 1, 0)[0])
        ignored: list[str] = []
        with self.session():
            for key, values in self.bounds.items():
                low, high = values.ends()
                if low == high:
                    continue
                seen = [self._probe(base.model_copy(update={key: v})) for v in (low, high)]
                if seen[0] == seen[1]:
                    ignored.append(f"{key} ({low!r} and {high!r})")
        if not ignored:
            n = len(self.bounds)
            return [Check(name, None, f"{n} parameter{'s' * (n != 1)}")]
        return [
            Check(
                name,
                f"episodes of seed {base.seed} with {', '.join(ignored)} began alike and "
                f"answered the same {len(PROBE_ANSWERS)} moves alike: the server's reset seems "
                "not to take it (OpenEnv passes unknown keyword arguments on silently); name in "
                "environment.options.task_params only parameters its reset reads",
            )
        ]

    def _probe(self, spec: OpenEnvTask) -> list[tuple[str, bool, bool, bool]]:
        """What the server showed in an episode of `spec` answered with `PROBE_ANSWERS`."""
        episode = self.new_episode(spec, None, None)
        seen = [(episode.observation, True, False, episode.done)]
        try:
            for answer in PROBE_ANSWERS:
                if episode.done:
                    break
                move = episode.act(answer)
                seen.append((move.observation, move.valid, move.progress, move.done))
        finally:
            if not episode.done:
                episode.close()
        return seen

    def tracking_tags(self) -> dict[str, str]:
        """The server's name from /metadata, and where it runs."""
        with self.session():
            where = self.options.url or f"{self._base} (started by: {self.options.command})"
            return {"openenv.name": self.server_name, "openenv.url": cast(str, where)}


ENVIRONMENT = OpenEnvEnvironment
