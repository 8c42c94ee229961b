"""Web apps in headless Chromium behind the interface."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import ClassVar, cast

from pydantic import BaseModel, ConfigDict, Field

from rlanything_core.base.generation import Messages
from rlanything_core.envs.demos import Demo
from rlanything_core.envs.gui.apps import TEMPLATES
from rlanything_core.envs.gui.browser import Browser, BrowserOptions, GuiEpisode
from rlanything_core.envs.gui.demos import (
    gui_judge_demonstrations,
    gui_policy_demonstrations,
    gui_rewrite_demonstrations,
    gui_trajectories,
)
from rlanything_core.envs.gui.tasks import (
    EXAMPLE_HINT,
    MAX_STEPS,
    GuiSpec,
    generate_gui_specs,
    parse_gui_spec,
)
from rlanything_core.envs.interface import Environment, Role, Split, StepView, TaskSpec, WarmStart
from rlanything_core.method.prompts import INVALID_ACTION, judge_messages


class BrowserConfig(BaseModel):
    """How headless Chromium runs (see rlanything_core/envs/gui/browser.py)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    executable: str = "/usr/bin/chromium"
    """The Chromium binary Playwright drives (Debian's package by default)."""
    viewport: tuple[int, int] = (900, 700)
    """Page width and height in pixels (screenshots have this size)."""
    action_timeout_ms: int = Field(3000, ge=100)
    """Per-step timeout in milliseconds (≥ 100): how long one click, typing or choice may take
    before it counts as an impossible action."""
    screenshots: bool = True
    """Save a PNG per step and record its path in the rollout rows."""

    def options(self) -> BrowserOptions:
        return BrowserOptions(
            self.executable, self.viewport, self.action_timeout_ms, self.screenshots
        )


class GuiOptions(BaseModel):
    """`environment.options` of the gui environment."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    step_slack: int = Field(6, ge=0)
    """Each task allows the expert's plan length plus this many steps (≥ 0; the step limit):
    room to recover from a wrong step."""
    history_steps: int = Field(2, ge=0)
    """Previous actions shown in the policy's and the RM's prompts (≥ 0; 0 = none)."""
    browser: BrowserConfig = BrowserConfig()
    """How headless Chromium runs."""


class GuiEnvironment(Environment[GuiOptions]):
    """Tasks in small web apps, played by clicking, typing and choosing in Chromium."""

    Options: ClassVar[type[BaseModel]] = GuiOptions
    warm_starts: ClassVar[frozenset[Role]] = frozenset({"policy", "reward_model", "env_model"})
    serial = True  # Playwright objects belong to the thread that made them
    designer_system = (
        "You design tasks for an agent that operates web apps. A task is a JSON object with the "
        "fields app, template, params, hints, max_steps and seed; the agent reads the template's "
        "instruction followed by the hints."
    )

    def __init__(self, name: str, options: GuiOptions, pool_split: Split) -> None:
        super().__init__(name, options, pool_split)
        self._browser: Browser | None = None

    def parse_spec(self, data: str | dict[str, object]) -> GuiSpec:
        return parse_gui_spec(data)

    def generate(self, split: Split, n: int, seed: int) -> Sequence[GuiSpec]:
        return generate_gui_specs(split, n, seed, self.options.step_slack)

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        """Chromium (and the apps' server) run while the episodes of one `play` call do."""
        with Browser(self.options.browser.options()) as browser:
            self._browser = browser
            try:
                yield
            finally:
                self._browser = None

    def new_episode(self, spec: TaskSpec, shots: Path | None, root: Path | None) -> GuiEpisode:
        if self._browser is None:
            raise RuntimeError("gui episodes are made inside GuiEnvironment.session()")
        return GuiEpisode(
            cast(GuiSpec, spec), self._browser, self.options.history_steps, shots, root
        )

    def judge_messages(self, step: StepView, earlier: Sequence[StepView]) -> Messages:
        """The earlier actions only, not their pages (one page before and one after is long)."""
        h = self.options.history_steps
        shown = [(s.action or INVALID_ACTION, "") for s in earlier[-h:]] if h else []
        return judge_messages(
            step.goal, shown, step.observation, step.response, step.action, step.next_observation
        )

    def rewrite_fields(self, spec: TaskSpec) -> str:
        gui = cast(GuiSpec, spec)
        own = sorted(t for t, v in TEMPLATES.items() if v.app == gui.app)
        return (
            "hints: a list of sentences, each naming an element of the app in single quotes, like "
            f'"{EXAMPLE_HINT[gui.app]}"; more and more precise hints make the task easier, fewer '
            "make it harder. template: one of "
            f"{own} (a different goal in the same app; params must then fit it). max_steps: "
            f"1-{MAX_STEPS}, fewer is harder."
        )

    def rewrite_example(self, spec: TaskSpec) -> str:
        return json.dumps({"hints": [EXAMPLE_HINT[cast(GuiSpec, spec).app]]})

    def demonstrations(self, request: WarmStart) -> list[Demo]:
        """The expert's hinted plans played in Chromium (policy, judge); hint changes (env)."""
        if request.answer_noise:
            raise ValueError(
                f"policy.warm_start.answer_noise: {self.name!r} cannot draw a random answer for "
                "its demonstrations; set answer_noise: 0."
            )
        specs = [cast(GuiSpec, s) for s in self.warm_start_specs(request)]
        if request.role == "env_model":
            return gui_rewrite_demonstrations(specs, self.rewrite_messages, seed=request.seed)
        steps = gui_trajectories(
            specs,
            request.noise,
            self.options.history_steps,
            request.seed,
            self.options.browser.options(),
        )
        if request.role == "policy":
            return gui_policy_demonstrations(steps, explain=request.explain)
        return gui_judge_demonstrations(
            steps, label_noise=request.label_noise, seed=request.seed, explain=request.explain
        )


ENVIRONMENT = GuiEnvironment
"""The class `environment.name: gui` loads."""
