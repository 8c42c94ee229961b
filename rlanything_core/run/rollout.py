"""Rollouts: the policy plays each environment task G times, all episodes stepping in lockstep so
that every step of every unfinished episode goes into one batched generation.

With `Sampling.choose` the policy picks among the admissible answers its episodes list instead of
writing one (`policy.answers: choose`, `Chooser`).

An episode ends when it says it is done, or when it has taken `max_steps` steps (the smaller of
its task's `max_steps`, where the spec has one, and `environment.max_episode_steps`): an episode
cut there is failed, and its last row has `done` False (`method.signals.cut_episodes`).

Each step's sample seed is derive_seed(base_seed, purpose, round, task_id, task_version,
rollout_idx, step_idx); it is stored in the row so any step can be replayed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from rlanything_core.base.generation import AnswerScore, Chooser, Engine, Generation, Messages
from rlanything_core.base.seeding import derive_seed
from rlanything_core.envs.common import Episode, ListsAnswers
from rlanything_core.envs.interface import Environment, TaskRef


@dataclass(frozen=True)
class Sampling:
    """How the policy samples during a rollout."""

    temperature: float
    max_new_tokens: int
    batch_size: int
    choose: bool = False
    """Pick among the answers each episode lists (`ListsAnswers`), weighted by the policy's
    probability of writing each, instead of generating (`policy.answers: choose`)."""
    answer_score: AnswerScore = "sum"
    """With `choose`: score an answer by its tokens' summed or mean log-prob."""


@dataclass(frozen=True)
class Screens:
    """Where episodes that take screenshots (gui) keep them."""

    screens: Path | None = None
    """Screenshots go to screens/<task_id>-v<version>/rollout_<g>/step_<k>.png (None: none)."""
    root: Path | None = None
    """Screenshot paths are recorded relative to this directory (the run directory)."""

    def shots(self, task: TaskRef, g: int) -> tuple[Path | None, Path | None]:
        """The screenshot directory of rollout g of `task`, and the root paths are relative to."""
        if self.screens is None:
            return None, None
        return self.screens / f"{task.task_id}-v{task.task_version}" / f"rollout_{g}", self.root


DEFAULT_MAX_STEPS = 200
"""`environment.max_episode_steps`' default: above every built-in task's step limit (at most 100),
so that only an episode that would never end is cut."""


def play(
    engine: Engine,
    env: Environment,
    tasks: Sequence[TaskRef],
    *,
    rollouts_per_task: int,
    round_idx: int,
    base_seed: int,
    checkpoint: str,
    sampling: Sampling,
    purpose: str = "rollout",
    screens: Screens | None = None,
    on_episodes: Callable[[int], None] | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
) -> list[dict[str, object]]:
    """Play every task `rollouts_per_task` times; return one row per step (the rollouts schema).

    `purpose` separates the seed streams of the round's rollouts and of acceptance checks.
    `env` makes the episodes, inside its `session()` (gui: Chromium runs while they play);
    `screens` says where screenshots go.
    `on_episodes(n)` is called after each lockstep step with the number of episodes that ended.
    `max_steps`: no episode takes more steps (`step_limit`); one cut there fails.
    """
    screens = screens or Screens()
    with env.session():
        episodes = [
            (task, g, env.new_episode(task.spec, *screens.shots(task, g)))
            for task in tasks
            for g in range(rollouts_per_task)
        ]
        rows = _step_all(
            engine,
            episodes,
            [step_limit(task.spec, max_steps) for task, _, _ in episodes],
            round_idx,
            base_seed,
            checkpoint,
            sampling,
            purpose,
            1 if env.serial else env.act_workers,
            on_episodes,
        )
    flat: list[dict[str, object]] = []
    for (_, _, ep), steps in zip(episodes, rows, strict=True):
        for row in steps:
            row["outcome"] = 1 if ep.success and ep.done else -1
            row["num_steps"] = ep.steps_taken
        flat += steps
    return flat


def step_limit(spec: object, max_steps: int) -> int:
    """The steps an episode of `spec` may take: its `max_steps` field, where it has an integer
    one, capped at `max_steps`."""
    own = getattr(spec, "max_steps", None)
    return min(own, max_steps) if isinstance(own, int) and own > 0 else max_steps


def _step_all(
    engine: Engine,
    episodes: list[tuple[TaskRef, int, Episode]],
    limits: list[int],
    round_idx: int,
    base_seed: int,
    checkpoint: str,
    sampling: Sampling,
    purpose: str,
    workers: int,
    on_episodes: Callable[[int], None] | None,
) -> list[list[dict[str, object]]]:
    """Step every episode in lockstep until each is done or has taken its `limits` steps; one
    list of rows per episode.
    `workers`: threads that call `act` (1: in this thread, for environments whose engines
    belong to it, such as Playwright's or TextWorld's)."""
    rows: list[list[dict[str, object]]] = [[] for _ in episodes]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        while True:
            active = [
                i
                for i, (_, _, ep) in enumerate(episodes)
                if not ep.done and len(rows[i]) < limits[i]
            ]
            if not active:
                break
            shown = [
                (episodes[i][2].observation, episodes[i][2].steps_taken, episodes[i][2].screenshot)
                for i in active
            ]
            seeds = [
                derive_seed(
                    base_seed,
                    purpose,
                    round_idx,
                    episodes[i][0].task_id,
                    episodes[i][0].task_version,
                    episodes[i][1],
                    episodes[i][2].steps_taken,
                )
                for i in active
            ]
            outs = _answer(engine, [episodes[i][2] for i in active], seeds, sampling)
            # Moves run in parallel threads (coding: tests in the sandbox) unless the
            # environment is serial (its engines belong to this thread).
            mapper = map if workers == 1 else pool.map
            moves = list(
                mapper(lambda i, o: episodes[i][2].act(o.text), active, outs)  # type: ignore[misc]
            )
            for i, seed, out, (observation, step_idx, screenshot), move in zip(
                active, seeds, outs, shown, moves, strict=True
            ):
                task, g, ep = episodes[i]
                rows[i].append(
                    {
                        "round": round_idx,
                        "task_id": task.task_id,
                        "task_version": task.task_version,
                        "rollout_idx": g,
                        "step_idx": step_idx,
                        "seed": seed,
                        "checkpoint": checkpoint,
                        "goal": ep.goal_text,
                        "observation": observation,
                        "prompt": engine.decode(out.prompt_token_ids),
                        "response": out.text,
                        "action": move.action,
                        "action_valid": move.valid,
                        "next_observation": move.observation,
                        "progress": move.progress,
                        "done": move.done,
                        "pass_fraction": move.pass_fraction,
                        "screenshot": screenshot,
                        "prompt_token_ids": out.prompt_token_ids,
                        "response_token_ids": out.token_ids,
                        "sampler_logprobs": out.logprobs,
                        "finish_reason": out.finish_reason,
                    }
                )
            if on_episodes is not None:
                on_episodes(sum(episodes[i][2].done or len(rows[i]) >= limits[i] for i in active))
    return rows


def _answer(
    engine: Engine, episodes: list[Episode], seeds: list[int], sampling: Sampling
) -> list[Generation]:
    """The policy's answer at each episode's current step: generated, or chosen among the
    answers the episode lists (`sampling.choose`)."""
    prompts: list[Messages] = [ep.messages() for ep in episodes]
    if not sampling.choose:
        return engine.generate(
            prompts,
            seeds,
            max_new_tokens=sampling.max_new_tokens,
            temperature=sampling.temperature,
            batch_size=sampling.batch_size,
        )
    if not isinstance(engine, Chooser):
        raise ValueError(
            f"policy.answers: choose needs an engine that scores answers; {type(engine).__name__} "
            "does not. Use policy.model.engine.kind: hf, or policy.answers: generate."
        )
    listed = []
    for ep in episodes:
        if not isinstance(ep, ListsAnswers):
            raise ValueError(
                f"policy.answers: choose needs episodes that list their admissible answers "
                f"(an answers() method); {type(ep).__name__} has none. Use policy.answers: "
                "generate with this environment."
            )
        listed.append(ep.answers())
    return engine.choose(
        prompts,
        listed,
        seeds,
        temperature=sampling.temperature,
        batch_size=sampling.batch_size,
        score=sampling.answer_score,
    )
